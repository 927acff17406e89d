//! What every layer needs to know of CUPTI and the CUDA libraries, kept in the bottom
//! layer because the rings and the writer use it too: the API calls we record and
//! their callback ids (`apis`), which kernels a recorded launch claims (`claims`), and
//! where the CUDA runtime and CUPTI are found (`discover`).

pub mod apis;
pub mod claims;
pub mod discover;
