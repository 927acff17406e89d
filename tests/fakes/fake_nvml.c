/*
 * A fake libnvidia-ml.so.1: one GPU ("Fake NVIDIA H200", 00000000:17:00.0) whose
 * state is chosen by FAKE_NVML_SCENARIO:
 *
 *   healthy    SM 1980/1980 MHz, no clock event reasons, PCIe gen 5 x16 of 5 x16,
 *              the loading process alone on the GPU (1 GiB, 100% of the SM samples)
 *   throttled  SM 1200 of 1980 MHz, reasons SW power cap + HW slowdown, 700 of 700 W
 *   shared     a second compute process (pid FAKE_NVML_OTHER_PID, default 424242,
 *              12 GiB) holds 40% of the SM samples, the loading process 60%
 *   pcie       the link trained at gen 3 x8 of gen 5 x16
 *   xid        one Xid 79 event is waiting, and 2 more uncorrected ECC errors
 *              appear after the first read of the counter
 *   noperm     nvmlInit_v2 returns NVML_ERROR_NO_PERMISSION
 *   nodevice   nvmlInit_v2 succeeds, no GPU
 *   hang       as healthy, but reading a clock never returns (a driver call stuck)
 *
 * NVML GPM (nvmlGpm*) as FAKE_NVML_GPM says (unset: unsupported):
 *
 *   memory       supported; every pair of samples reads as elementwise chains did on an
 *                H200: SM 99.8%, occupancy 90%, tensor pipes 0%, DRAM 58.5%, FP32 12%,
 *                integer 3%, PCIe 20 MiB/s in and 10 out, no NVLink
 *   tensor       supported; as bf16 matmuls: SM 96%, occupancy 14%, tensor (HMMA) 93%,
 *                DRAM 17%, FP32 1%
 *   unsupported  nvmlGpmQueryDeviceSupport says the device has no GPM
 *   noperm       supported, but nvmlGpmSampleGet returns NVML_ERROR_NO_PERMISSION
 *   hang         supported, but nvmlGpmSampleGet never returns
 *
 * The process shown on the GPU as the job is the loading process itself, or with
 * FAKE_NVML_JOB=child the loading process's child (as under `gputrace run`, which
 * reads NVML from its own process while its child does the GPU work; none listed
 * when it has no child).
 *
 * Every call is counted; FAKE_NVML_LOG names a file that gets one line per
 * nvmlInit_v2 / nvmlShutdown (to check they balance).
 * Layouts follow nvml.h (the structs below are the ones the binding pins by size).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef void *nvmlEventSet_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_TIMEOUT = 10,
};

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

static int the_gpu;
#define GPU ((nvmlDevice_t)&the_gpu)
static int the_set;
static int initialised;

static const char *scenario(void) {
    const char *s = getenv("FAKE_NVML_SCENARIO");
    return s ? s : "healthy";
}

static int is(const char *s) { return strcmp(scenario(), s) == 0; }
/* Held at the power limit under load (sw_power_cap alone): at the default limit
 * (`power_cap`) or at one lowered to 400 W (`power_cap_lowered`). */
static int is_power_cap(void) { return is("power_cap") || is("power_cap_lowered"); }

static void log_line(const char *what) {
    const char *p = getenv("FAKE_NVML_LOG");
    if (!p)
        return;
    FILE *f = fopen(p, "a");
    if (f) {
        fprintf(f, "%s\n", what);
        fclose(f);
    }
}

static unsigned int other_pid(void) {
    const char *p = getenv("FAKE_NVML_OTHER_PID");
    return p ? (unsigned int)strtoul(p, NULL, 10) : 424242u;
}

/* The job's pid on the GPU (see the top); 0 for none. */
static unsigned int job_pid(void) {
    const char *j = getenv("FAKE_NVML_JOB");
    if (!j || strcmp(j, "child") != 0)
        return (unsigned int)getpid();
    unsigned int found = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && !found && (e = readdir(d))) {
        char path[64], buf[512];
        unsigned int pid = (unsigned int)strtoul(e->d_name, NULL, 10);
        if (pid == 0)
            continue;
        snprintf(path, sizeof path, "/proc/%u/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        /* "pid (name) state ppid ...": the name may hold anything but ends at the last ')'. */
        char *p = strrchr(buf, ')');
        unsigned int ppid = 0;
        if (p && sscanf(p + 1, " %*c %u", &ppid) == 1 && ppid == (unsigned int)getpid())
            found = pid;
    }
    if (d)
        closedir(d);
    return found;
}

#define NEED_INIT()                                                                        \
    do {                                                                                   \
        if (!initialised)                                                                  \
            return NVML_ERROR_UNINITIALIZED;                                               \
    } while (0)
#define NEED_GPU(d)                                                                        \
    do {                                                                                   \
        NEED_INIT();                                                                       \
        if ((d) != GPU)                                                                    \
            return NVML_ERROR_INVALID_ARGUMENT;                                            \
    } while (0)

EXPORT nvmlReturn_t nvmlInit_v2(void) {
    if (is("noperm"))
        return NVML_ERROR_NO_PERMISSION;
    initialised++;
    log_line("init");
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    NEED_INIT();
    initialised--;
    log_line("shutdown");
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t put_string(char *buf, unsigned int len, const char *s) {
    if (!buf || strlen(s) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buf, s);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned int len) {
    NEED_INIT();
    return put_string(buf, len, "580.159.04");
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *buf, unsigned int len) {
    NEED_INIT();
    return put_string(buf, len, "13.580.159.04");
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    NEED_INIT();
    const char *c = getenv("FAKE_NVML_CUDA_VERSION");
    *v = c ? atoi(c) : 13000;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
    NEED_INIT();
    *n = is("nodevice") ? 0 : 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    NEED_INIT();
    if (i != 0 || is("nodevice"))
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = GPU;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned int len) {
    NEED_GPU(d);
    return put_string(buf, len, "Fake NVIDIA H200");
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int len) {
    NEED_GPU(d);
    return put_string(buf, len, "GPU-00000000-fake-0000-0000-000000000000");
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
    NEED_GPU(d);
    memset(p, 0, sizeof *p);
    strcpy(p->busIdLegacy, "0000:17:00.0");
    strcpy(p->busId, "00000000:17:00.0");
    p->bus = 0x17;
    p->pciDeviceId = 0x233510de;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, unsigned int type, unsigned int *mhz) {
    NEED_GPU(d);
    while (is("hang"))
        pause();
    if (type == 1) /* SM */
        *mhz = is("throttled") ? 1200 : is_power_cap() ? 1500 : 1980;
    else if (type == 2) /* MEM */
        *mhz = 2619;
    else
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, unsigned int type, unsigned int *mhz) {
    NEED_GPU(d);
    if (type == 1)
        *mhz = 1980;
    else if (type == 2)
        *mhz = 2619;
    else
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
    NEED_GPU(d);
    *r = is("throttled") ? (0x4ull | 0x8ull) : is_power_cap() ? 0x4ull : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    NEED_GPU(d);
    *mw = is("throttled") ? 700000 : 350000;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) {
    NEED_GPU(d);
    *mw = is("power_cap_lowered") ? 400000 : 700000;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t d, unsigned int *mw) {
    NEED_GPU(d);
    *mw = 700000;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, unsigned int sensor, unsigned int *c) {
    NEED_GPU(d);
    if (sensor != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *c = is("throttled") ? 87 : 45;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    NEED_GPU(d);
    u->gpu = is("shared") ? 100 : 70;
    u->memory = 30;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    NEED_GPU(d);
    m->total = 150ull << 30;
    m->used = (is("shared") ? 13ull : 1ull) << 30;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *v) {
    NEED_GPU(d);
    *v = is("pcie") ? 3 : 5;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *v) {
    NEED_GPU(d);
    *v = 5;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *v) {
    NEED_GPU(d);
    *v = is("pcie") ? 8 : 16;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *v) {
    NEED_GPU(d);
    *v = 16;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, unsigned int counter, unsigned int *kbs) {
    NEED_GPU(d);
    *kbs = counter == 0 ? 1000 : 250000;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n,
                                                            nvmlProcessInfo_t *p) {
    NEED_GPU(d);
    unsigned int job = job_pid(), want = (job ? 1 : 0) + (is("shared") ? 1 : 0), i = 0;
    if (want && (!p || *n < want)) {
        *n = want;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (want)
        memset(p, 0, want * sizeof *p);
    if (job) {
        p[i].pid = job;
        p[i++].usedGpuMemory = 1ull << 30;
    }
    if (is("shared")) {
        p[i].pid = other_pid();
        p[i++].usedGpuMemory = 12ull << 30;
    }
    *n = want;
    return NVML_SUCCESS;
}

static unsigned long long now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (unsigned long long)t.tv_sec * 1000000ull + (unsigned long long)t.tv_nsec / 1000;
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d,
                                                    nvmlProcessUtilizationSample_t *s,
                                                    unsigned int *n, unsigned long long last) {
    NEED_GPU(d);
    unsigned int job = job_pid(), want = (job ? 1 : 0) + (is("shared") ? 1 : 0), i = 0;
    unsigned long long ts = now_us();
    if (ts <= last || !want)
        return NVML_ERROR_NOT_FOUND;
    if (!s || *n < want) {
        *n = want;
        return s ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    memset(s, 0, want * sizeof *s);
    if (job) {
        s[i].pid = job;
        s[i].timeStamp = ts;
        s[i].smUtil = is("shared") ? 60 : 100;
        s[i++].memUtil = 20;
    }
    if (is("shared")) {
        s[i].pid = other_pid();
        s[i].timeStamp = ts;
        s[i].smUtil = 40;
        s[i++].memUtil = 35;
    }
    *n = want;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int *on) {
    NEED_GPU(d);
    *on = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, int *mode) {
    NEED_GPU(d);
    *mode = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *cur, unsigned int *pend) {
    NEED_GPU(d);
    *cur = 0;
    *pend = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t d, unsigned int words, unsigned long *set) {
    NEED_GPU(d);
    if (words < 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memset(set, 0, words * sizeof *set);
    const char *c = getenv("FAKE_NVML_LOCAL_CPUS_MASK");
    set[0] = c ? strtoul(c, NULL, 0) : ~0ul;
    return NVML_SUCCESS;
}

static unsigned long long ecc_reads;

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, unsigned int type, unsigned int counter,
                                                unsigned long long *count) {
    NEED_GPU(d);
    (void)counter;
    if (type == 1 && is("xid"))
        *count = __atomic_fetch_add(&ecc_reads, 1, __ATOMIC_RELAXED) == 0 ? 0 : 2;
    else
        *count = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    NEED_INIT();
    *set = &the_set;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    NEED_GPU(d);
    (void)types;
    return set == &the_set ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

static int xid_given;

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *e, unsigned int timeout_ms) {
    NEED_INIT();
    (void)timeout_ms;
    if (set != &the_set)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is("xid") && !__atomic_exchange_n(&xid_given, 1, __ATOMIC_RELAXED)) {
        memset(e, 0, sizeof *e);
        e->device = GPU;
        e->eventType = 0x8; /* nvmlEventTypeXidCriticalError */
        e->eventData = 79;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_TIMEOUT;
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    return set == &the_set ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* ======================= GPM ======================= */

typedef struct {
    unsigned int version, isSupportedDevice;
} nvmlGpmSupport_t;

#define GPM_MAGIC 0x47504d53u
typedef struct {
    unsigned int magic;
    unsigned long long taken_ns, seq;
} fake_gpm_sample;

typedef struct {
    const char *shortName, *longName, *unit;
} nvmlGpmMetricInfo_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;

/* NVML_GPM_METRIC_MAX of an older header: NVML reads only numMetrics entries. */
#define FAKE_GPM_METRIC_MAX 98
typedef struct {
    unsigned int version, numMetrics;
    fake_gpm_sample *sample1, *sample2;
    nvmlGpmMetric_t metrics[FAKE_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

static const char *gpm_mode(void) {
    const char *m = getenv("FAKE_NVML_GPM");
    return m ? m : "unsupported";
}
static int gpm_is(const char *m) { return strcmp(gpm_mode(), m) == 0; }

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *s) {
    NEED_GPU(d);
    if (!s || s->version != 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    s->isSupportedDevice = !gpm_is("unsupported");
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(fake_gpm_sample **out) {
    NEED_INIT();
    fake_gpm_sample *s = calloc(1, sizeof *s);
    if (!s)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    s->magic = GPM_MAGIC;
    *out = s;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleFree(fake_gpm_sample *s) {
    if (!s || s->magic != GPM_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    s->magic = 0;
    free(s);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, fake_gpm_sample *s) {
    static unsigned long long seq;
    NEED_GPU(d);
    if (!s || s->magic != GPM_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpm_is("unsupported"))
        return NVML_ERROR_NOT_SUPPORTED;
    if (gpm_is("noperm"))
        return NVML_ERROR_NO_PERMISSION;
    while (gpm_is("hang"))
        pause();
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    s->taken_ns = (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
    s->seq = ++seq;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t d, unsigned int gi, fake_gpm_sample *s) {
    (void)gi;
    (void)s;
    NEED_GPU(d);
    return NVML_ERROR_NOT_SUPPORTED;
}

/* A metric's value in the profile; -1: the device has no such metric. */
static double gpm_value(unsigned int id) {
    int mem = gpm_is("memory");
    switch (id) {
    case 2: return mem ? 99.8 : 96.0;   /* SM util */
    case 3: return mem ? 90.0 : 14.0;   /* SM occupancy */
    case 4: return mem ? 3.0 : 2.0;     /* integer */
    case 5: return mem ? 0.0 : 93.0;    /* any tensor */
    case 6: return 0.0;                 /* DFMA */
    case 7: return mem ? 0.0 : 93.0;    /* HMMA */
    case 9: return 0.0;                 /* IMMA */
    case 10: return mem ? 58.5 : 17.0;  /* DRAM bandwidth */
    case 11: return 0.0;                /* FP64 */
    case 12: return mem ? 12.0 : 1.0;   /* FP32 */
    case 13: return 0.0;                /* FP16 */
    case 20: return 10.0;               /* PCIe TX MiB/s */
    case 21: return 20.0;               /* PCIe RX MiB/s */
    default: return -1;                 /* NVLink and the rest: not on this device */
    }
}

EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    NEED_INIT();
    if (!m || m->version != 1 || m->numMetrics > FAKE_GPM_METRIC_MAX || !m->sample1 ||
        !m->sample2 || m->sample1->magic != GPM_MAGIC || m->sample2->magic != GPM_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* Two samples, the second taken after the first. */
    if (m->sample1->seq == 0 || m->sample2->seq <= m->sample1->seq)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < m->numMetrics; i++) {
        double v = gpm_value(m->metrics[i].metricId);
        m->metrics[i].nvmlReturn = v < 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
        m->metrics[i].value = v < 0 ? 0 : v;
        m->metrics[i].metricInfo.shortName = "fake";
        m->metrics[i].metricInfo.longName = "fake metric";
        m->metrics[i].metricInfo.unit = "%";
    }
    return NVML_SUCCESS;
}
