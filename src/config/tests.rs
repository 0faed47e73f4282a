//! The config file's parsing and checks.

use super::*;

#[test]
fn the_example_config_parses_and_matches_the_defaults() {
    let text = include_str!("../../config/gantry.example.toml");
    let cfg: FileConfig = toml::from_str(text).expect("example config parses");
    let d = FileConfig::default();
    assert_eq!(cfg.web.listen, d.web.listen);
    assert_eq!(cfg.web.concourse_version, d.web.concourse_version);
    assert_eq!(cfg.web.registration_key, d.web.registration_key);
    assert_eq!(cfg.web.max_artifact_bytes, d.web.max_artifact_bytes);
    // Stalled workers are pruned by default, after a day.
    assert_eq!(cfg.web.stalled_worker_timeout_secs, 86_400);
    assert_eq!(d.web.stalled_worker_timeout_secs, 86_400);
    assert_eq!(
        cfg.web.request_body_timeout_secs,
        d.web.request_body_timeout_secs
    );
    assert_eq!(
        cfg.web.request_body_min_bytes_per_sec,
        d.web.request_body_min_bytes_per_sec
    );
    assert_eq!(
        cfg.worker.heartbeat_interval_secs,
        d.worker.heartbeat_interval_secs
    );
    assert_eq!(cfg.worker.identity, d.worker.identity);
    assert_eq!(cfg.telemetry, d.telemetry);
    assert_eq!(d.telemetry.otlp_endpoint, None);
    assert!(!d.worker.identity.allow_privileged);
    let on: FileConfig = toml::from_str("[worker]\nallow_privileged = true\n").unwrap();
    assert!(on.worker.identity.allow_privileged);
    let encoding = gantry_wire::spec::Encoding::Zstd;
    assert_eq!(
        cfg.web.streaming.parse(encoding).unwrap(),
        d.web.streaming.parse(encoding).unwrap()
    );
}

#[test]
fn gc_settings_are_read_with_defaults_and_checked() {
    let d = FileConfig::default().web.gc.parse().unwrap();
    assert_eq!(d, gantry_actors::api::CollectorConfig::default());
    let cfg: FileConfig =
        toml::from_str("[web.gc]\ninterval_secs = 5\nunowned_artifact_secs = 60\n").unwrap();
    let gc = cfg.web.gc.parse().unwrap();
    assert_eq!(gc.interval, std::time::Duration::from_secs(5));
    assert_eq!(gc.artifacts.unowned, std::time::Duration::from_secs(60));
    assert_eq!(gc.missing_grace, d.missing_grace);
    let zero: FileConfig = toml::from_str("[web.gc]\ninterval_secs = 0\n").unwrap();
    assert!(zero
        .web
        .gc
        .parse()
        .unwrap_err()
        .to_string()
        .contains("interval_secs"));
    let typo = toml::from_str::<FileConfig>("[web.gc]\nintervall_secs = 5\n").unwrap_err();
    assert!(typo.to_string().contains("intervall_secs"), "{typo}");
}

#[test]
fn disk_pressure_settings_are_read_with_defaults_and_checked() {
    let d = FileConfig::default().web.gc.parse().unwrap();
    assert_eq!((d.disk_pressure.fill, d.disk_pressure.batch), (0.85, 10));
    let cfg: FileConfig =
        toml::from_str("[web.gc]\ndisk_pressure_fill = 0.5\ndisk_pressure_batch = 3\n").unwrap();
    let gc = cfg.web.gc.parse().unwrap();
    assert_eq!((gc.disk_pressure.fill, gc.disk_pressure.batch), (0.5, 3));
    assert_eq!(gc.interval, d.interval);
    let tiny: FileConfig = toml::from_str("[web.gc]\ndisk_pressure_fill = 0.000001\n").unwrap();
    assert_eq!(tiny.web.gc.parse().unwrap().disk_pressure.fill, 0.000001);
    let full: FileConfig = toml::from_str("[web.gc]\ndisk_pressure_fill = 1\n").unwrap();
    assert_eq!(full.web.gc.parse().unwrap().disk_pressure.fill, 1.0);
    for bad in ["0", "0.0", "-0.5", "1.01", "85", "nan"] {
        let text = format!("[web.gc]\ndisk_pressure_fill = {bad}\n");
        let cfg: FileConfig = toml::from_str(&text).unwrap();
        let err = cfg.web.gc.parse().unwrap_err().to_string();
        assert!(err.contains("disk_pressure_fill"), "{bad}: {err}");
    }
    let zero: FileConfig = toml::from_str("[web.gc]\ndisk_pressure_batch = 0\n").unwrap();
    let err = zero.web.gc.parse().unwrap_err().to_string();
    assert!(err.contains("disk_pressure_batch"), "{err}");
    let negative = toml::from_str::<FileConfig>("[web.gc]\ndisk_pressure_batch = -1\n");
    assert!(negative.is_err());
}

#[test]
fn streaming_links_and_modes_are_checked() {
    let text = "[web.streaming]\nmode = \"relay\"\nlinks = [{ from = \"a\", to = \"*\", mode = \"p2p\" }]\n";
    let cfg: FileConfig = toml::from_str(text).unwrap();
    let parsed = cfg
        .web
        .streaming
        .parse(gantry_wire::spec::Encoding::Zstd)
        .unwrap();
    use gantry_actors::api::StreamMode;
    assert_eq!(parsed.mode_for("a", "b"), StreamMode::P2p);
    assert_eq!(parsed.mode_for("b", "a"), StreamMode::Relay);
    let bad: FileConfig = toml::from_str("[web.streaming]\nmode = \"ftp\"\n").unwrap();
    let err = bad
        .web
        .streaming
        .parse(gantry_wire::spec::Encoding::Zstd)
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"ftp\""), "{err}");
    let zero: FileConfig = toml::from_str("[web.streaming]\nmax_streams_out = 0\n").unwrap();
    assert!(zero
        .web
        .streaming
        .parse(gantry_wire::spec::Encoding::Zstd)
        .is_err());
}

#[test]
fn default_limits_fill_what_a_task_leaves_unset() {
    let cfg: FileConfig =
        toml::from_str("[worker.default_limits]\nmemory = 1048576\npids = 100\n").unwrap();
    let task = gantry_wire::spec::ResourceLimits {
        memory: Some(42),
        cpu: None,
        pids: None,
    };
    let merged = cfg.worker.default_limits.apply(&task);
    assert_eq!(
        (merged.memory, merged.cpu, merged.pids),
        (Some(42), None, Some(100))
    );
    let err = toml::from_str::<FileConfig>("[worker.default_limits]\nmemroy = 1\n").unwrap_err();
    assert!(err.to_string().contains("memroy"), "{err}");
}

#[test]
fn a_guarded_node_takes_no_default_or_empty_registration_key() {
    // Each guarded node: its [web] lines, and its [web.teams] table.
    let node = |web: &str, key: Option<&str>, teams: &str| {
        let key = key.map(|k| format!("registration_key = {k:?}\n"));
        let text = format!("[web]\n{web}{}{teams}", key.unwrap_or_default());
        toml::from_str::<FileConfig>(&text).unwrap().web
    };
    // Open, on loopback: the development key is taken.
    let open = node("", None, "");
    assert_eq!(
        open.effective_registration_key().unwrap(),
        DEV_REGISTRATION_KEY
    );
    // Empty is refused even there.
    assert!(node("", Some(""), "").effective_registration_key().is_err());
    for (web, teams) in [
        ("admin_token = \"a\"\n", ""),
        ("", "[web.teams]\nred = \"r\"\n"),
        ("listen = \"0.0.0.0:8080\"\n", ""),
    ] {
        let e = node(web, None, teams)
            .effective_registration_key()
            .unwrap_err();
        assert!(
            e.to_string().contains("--registration-key"),
            "{web}{teams}: {e}"
        );
        for key in [DEV_REGISTRATION_KEY, "", "  "] {
            let refused = node(web, Some(key), teams).effective_registration_key();
            assert!(refused.is_err(), "{web}{teams} with {key:?}");
        }
        let own = node(web, Some("s3cret"), teams).effective_registration_key();
        assert_eq!(own.unwrap(), "s3cret");
    }
}

#[test]
fn unknown_keys_are_named() {
    let err = toml::from_str::<FileConfig>("[web]\nlisten_addr = \"x\"\n").unwrap_err();
    assert!(err.to_string().contains("listen_addr"), "{err}");
}

#[test]
fn the_shared_settings_digest_leaves_out_what_is_a_nodes_own() {
    let parse = |text: &str| toml::from_str::<FileConfig>(text).unwrap().web;
    let base = parse("[web]\nnode_name = \"a\"\nlisten = \"127.0.0.1:1\"\n");
    let digest = base.shared_settings_digest();
    assert_eq!(digest.len(), 12);
    let own = parse(
        "[web]\nnode_name = \"b\"\nlisten = \"127.0.0.1:2\"\nnode_timeout_secs = 30\n\
         data_dir = \"/elsewhere\"\nregistration_key = \"secret\"\n",
    );
    assert_eq!(own.shared_settings_digest(), digest);
    for shared in [
        "[web]\nrerun_when_worker_disappears = true\n",
        "[web]\nbuilds_per_team_per_minute = 7\n",
        "[web.placement]\nwithout_inputs = [\"random\"]\n",
        "[web.gc]\ninterval_secs = 5\n",
    ] {
        assert_ne!(parse(shared).shared_settings_digest(), digest, "{shared}");
    }
}

#[test]
fn worker_web_is_a_string_or_an_array() {
    let one: FileConfig = toml::from_str("[worker]\nweb = \"http://a:1,http://b:2\"\n").unwrap();
    assert_eq!(one.worker.web, "http://a:1,http://b:2");
    let many: FileConfig =
        toml::from_str("[worker]\nweb = [\"http://a:1\", \"http://b:2\"]\n").unwrap();
    assert_eq!(many.worker.web, "http://a:1,http://b:2");
    let err =
        toml::from_str::<FileConfig>("[worker]\nweb = [\"http://a:1,http://b:2\"]\n").unwrap_err();
    assert!(err.to_string().contains("commas"), "{err}");
    assert!(toml::from_str::<FileConfig>("[worker]\nweb = 3\n").is_err());
}
