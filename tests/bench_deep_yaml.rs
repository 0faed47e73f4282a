//! `gantry bench deep-yaml` end to end: the real binary refuses a
//! document 100,000 levels deep to set-pipeline, a one-off build and
//! validate-plan's check, and prints what each cost in CPU time against a
//! normal set-pipeline.

use crate::common;

#[test]
fn deep_yaml_bench_prints_the_cpu_of_each_refusal_and_its_ratio() {
    let out = common::gantry()
        .args(["bench", "deep-yaml", "--depth", "100000"])
        .output()
        .expect("gantry runs");
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    assert_eq!(figures.get("deep_yaml_depth"), Some("100000"), "{stdout}");
    assert!(figures.number("deep_yaml_bytes") > 200_000.0, "{stdout}");
    figures.assert_positive(&["normal_set_pipeline_cpu_ms"]);
    figures.assert_ratio(
        "deep_set_pipeline_ratio",
        "deep_set_pipeline_cpu_ms",
        "normal_set_pipeline_cpu_ms",
    );
    // Refused while read: far under the tens of CPU-seconds of the whole
    // quadratic read (a generous bound for a shared machine).
    for name in [
        "deep_set_pipeline_cpu_ms",
        "deep_one_off_build_cpu_ms",
        "deep_validate_plan_cpu_ms",
    ] {
        assert!(figures.number(name) < 1000.0, "{name}:\n{stdout}");
    }
}
