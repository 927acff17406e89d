//! `gputrace doctor` against the fake libnvidia-ml.so.1: each state of the GPU gets
//! its line, and a missing or refusing NVML is one warning with the fix, never a
//! failure. (In this process: the fake reads FAKE_NVML_SCENARIO at every call, so
//! the tests take turns.)

use gputrace_analyzer::commands::doctor::{self, Doctor, Options, Status};
use gputrace_tests::*;
use std::sync::Mutex;

static TURN: Mutex<()> = Mutex::new(());

fn doctor_in(scenario: &str) -> Doctor {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("FAKE_NVML_SCENARIO", scenario);
    doctor::run(&Options {
        nvml: Some(fake_nvml().to_path_buf()),
        site_packages: Vec::new(),
        // Any library that loads stands for the driver's here.
        cuda_driver: Some(fake_nvml().to_path_buf()),
    })
}

fn line<'a>(d: &'a Doctor, check: &str) -> &'a doctor::Check {
    d.checks
        .iter()
        .find(|c| c.check == check)
        .unwrap_or_else(|| panic!("no {check} line in {:#?}", d.checks))
}

#[test]
fn a_healthy_gpu_is_all_ok() {
    let d = doctor_in("healthy");
    for c in [
        "nvml",
        "gpu",
        "clocks",
        "power_limit",
        "persistence",
        "pcie",
    ] {
        assert_eq!(line(&d, c).status, Status::Ok, "{:?}", line(&d, c));
    }
    assert!(line(&d, "nvml").message.contains("580.159.04"));
    assert!(line(&d, "gpu").message.contains("Fake NVIDIA H200"));
    // The test process itself is the one compute process the fake lists.
    assert_eq!(line(&d, "processes").status, Status::Warn);
    assert!(line(&d, "processes")
        .message
        .contains(&std::process::id().to_string()));
    let text = doctor::render_text(&d);
    assert!(text.starts_with("gputrace doctor"), "{text}");
    // One warning (the test process on the GPU), and ready.
    assert!(d.bottom_line.ready, "{:?}", d.bottom_line);
    assert!(
        text.ends_with("ready to trace (1 warning above)\n"),
        "{text}"
    );
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["checks"][0]["check"], "nvml");
    assert_eq!(json["checks"][0]["status"], "ok");
}

#[test]
fn throttled_clocks_are_a_warning_with_the_reason_and_fix() {
    let d = doctor_in("throttled");
    let c = line(&d, "clocks");
    assert_eq!(c.status, Status::Warn);
    assert!(c.message.contains("1200 of 1980 MHz"), "{c:?}");
    assert!(c.message.contains("hw_slowdown"), "{c:?}");
    assert!(c.fix.as_deref().unwrap().contains("PERFORMANCE"), "{c:?}");
}

#[test]
fn held_at_the_default_power_limit_is_no_warning_as_in_the_report() {
    // sw_power_cap alone at the default limit: how the GPU boosts under load (the
    // report's env_throttled calls it normal; both apply rules::ThrottleKind).
    let d = doctor_in("power_cap");
    let c = line(&d, "clocks");
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert!(
        c.message
            .contains("1500 of 1980 MHz; reasons: sw_power_cap"),
        "{c:?}"
    );
    // The same under a limit lowered to 400 W: a warning, with the limit's fix.
    let d = doctor_in("power_cap_lowered");
    let c = line(&d, "clocks");
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(c.fix.as_deref().unwrap().contains("-pl"), "{c:?}");
    assert_eq!(line(&d, "power_limit").status, Status::Warn);
}

#[test]
fn another_process_on_the_gpu_is_listed() {
    let d = doctor_in("shared");
    let c = line(&d, "processes");
    assert_eq!(c.status, Status::Warn);
    assert!(c.message.starts_with("2 compute process"), "{c:?}");
    assert!(c.message.contains("pid 424242"), "{c:?}");
}

#[test]
fn a_narrow_pcie_link_is_a_warning() {
    let d = doctor_in("pcie");
    let c = line(&d, "pcie");
    assert_eq!(c.status, Status::Warn);
    assert!(c.message.contains("gen 3 x8 (maximum gen 5 x16)"), "{c:?}");
}

#[test]
fn uncorrected_ecc_errors_are_a_warning() {
    // The fake's uncorrected counter reads 0 the first time, 2 after: the first look
    // is clean, the second finds the errors.
    let first = doctor_in("xid");
    assert!(
        first.checks.iter().all(|c| c.check != "ecc"),
        "{:#?}",
        first.checks
    );
    let d = doctor_in("xid");
    let c = line(&d, "ecc");
    assert_eq!(c.status, Status::Warn);
    assert!(c.message.starts_with("2 uncorrected ECC errors"), "{c:?}");
}

#[test]
fn nvml_refusing_access_is_one_warning_and_the_rest_goes_on() {
    let d = doctor_in("noperm");
    let c = line(&d, "nvml");
    assert_eq!(c.status, Status::Warn);
    assert!(c.message.contains("NO_PERMISSION"), "{c:?}");
    assert!(c.fix.as_deref().unwrap().contains("video group"), "{c:?}");
    assert!(d.checks.iter().all(|c| c.gpu.is_none()));
    line(&d, "cpus");
    line(&d, "system");
}

#[test]
fn a_missing_nvml_is_one_warning() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let d = doctor::run(&Options {
        nvml: Some("/nonexistent/libnvidia-ml.so.1".into()),
        site_packages: Vec::new(),
        // Any library that loads stands for the driver's here.
        cuda_driver: Some(fake_nvml().to_path_buf()),
    });
    let c = line(&d, "nvml");
    assert_eq!(c.status, Status::Warn);
    assert!(c.message.contains("not found"), "{c:?}");
    assert_eq!(
        d.checks.iter().filter(|c| c.status == Status::Warn).count(),
        1,
        "{:#?}",
        d.checks
    );
}

/// The command's exit status is the bottom line: 0 where a job can be traced, 4 where
/// nothing can (here: no NVIDIA driver on the test machine), with the reason last.
#[test]
fn the_exit_status_says_whether_anything_can_be_traced() {
    let gpu_here = std::path::Path::new("/dev/nvidia0").exists();
    let o = std::process::Command::new(gputrace_bin())
        .args(["doctor", "--nvml", "/nonexistent/libnvidia-ml.so.1"])
        .output()
        .expect("run gputrace doctor");
    let out = String::from_utf8_lossy(&o.stdout);
    let last = out.lines().last().unwrap_or_default();
    if gpu_here {
        eprintln!("a GPU is here: {last}");
        return;
    }
    assert_eq!(o.status.code(), Some(4), "{out}");
    assert!(last.starts_with("cannot trace here: "), "{out}");
    let json = std::process::Command::new(gputrace_bin())
        .args([
            "doctor",
            "--json",
            "--nvml",
            "/nonexistent/libnvidia-ml.so.1",
        ])
        .output()
        .expect("run gputrace doctor --json");
    assert_eq!(json.status.code(), Some(4));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["bottom_line"]["ready"], false);
}

fn doctor_with_gpm(gpm: &str) -> Doctor {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("FAKE_NVML_SCENARIO", "healthy");
    std::env::set_var("FAKE_NVML_GPM", gpm);
    let d = doctor::run(&Options {
        nvml: Some(fake_nvml().to_path_buf()),
        site_packages: Vec::new(),
        cuda_driver: Some(fake_nvml().to_path_buf()),
    });
    std::env::remove_var("FAKE_NVML_GPM");
    d
}

#[test]
fn the_gpm_line_says_whether_the_gpu_gives_performance_metrics_and_why_not() {
    let c = line(&doctor_with_gpm("memory"), "gpm").clone();
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert!(c.message.contains("NVML GPM): available"), "{c:?}");
    let c = line(&doctor_with_gpm("unsupported"), "gpm").clone();
    assert_eq!(c.status, Status::Info, "{c:?}");
    assert!(c.message.contains("unsupported_device"), "{c:?}");
    let c = line(&doctor_with_gpm("noperm"), "gpm").clone();
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(c.message.contains("no_permission"), "{c:?}");
    assert!(
        c.fix
            .as_deref()
            .unwrap_or("")
            .contains("NVreg_RestrictProfilingToAdminUsers=0"),
        "{c:?}"
    );
    // A GPM call that never returns: a bounded wait and a line saying so.
    let d = doctor_with_gpm("hang");
    let c = line(&d, "gpm");
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(c.message.contains("no answer from NVML"), "{c:?}");
    // The other lines are still there.
    assert_eq!(line(&d, "clocks").status, Status::Ok);
}
