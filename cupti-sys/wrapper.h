/*
 * Input header for scripts/gen-cupti-sys.sh, which feeds it to bindgen to
 * produce cupti-sys/src/bindings.rs. It is not used when building the crate.
 *
 * cupti.h brings in everything the bindings need: the activity and callback
 * APIs, the runtime and driver callback ids (cupti_runtime_cbid.h,
 * cupti_driver_cbid.h) and the callback parameter structs
 * (generated_cuda_runtime_api_meta.h, generated_cuda_meta.h). The generated
 * *_meta.h headers have no include guards, so they must not be named a
 * second time here; the script checks that cupti.h still includes them.
 * cupti_callbacks.h and cupti_activity.h do have guards.
 */
#include <cupti.h>
#include <cupti_runtime_cbid.h>
#include <cupti_driver_cbid.h>
