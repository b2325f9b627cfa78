//! Launcher detection on fake environments.

use super::*;

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
}

fn launch(vars: &[(&str, &str)]) -> Launch {
    match Launch::from_env(env(vars)) {
        Ok(l) => l,
        Err(e) => panic!("{vars:?}: {e}"),
    }
}

fn error(vars: &[(&str, &str)]) -> String {
    match Launch::from_env(env(vars)) {
        Ok(l) => panic!("{vars:?} gave {l}"),
        Err(e) => e.to_string(),
    }
}

fn addr(host: &str, port: u16) -> RendezvousAddr {
    RendezvousAddr { host: host.into(), port }
}

#[test]
fn parma_variables() {
    let l = launch(&[("PARMA_RANK", "2"), ("PARMA_WORLD_SIZE", "4"), ("PARMA_RENDEZVOUS", "10.0.0.1:7000")]);
    assert_eq!(
        (l.launcher(), l.role(), l.rank(), l.world()),
        (Launcher::Parma, Role::Node, Some(NodeId(2)), 4)
    );
    assert_eq!(l.rendezvous(), &addr("10.0.0.1", 7000));
    assert_eq!(l.advertised_host(), None);
    assert_eq!(l.to_string(), "rank 2 of 4, rendezvous 10.0.0.1:7000, launched by parma");
    let l = launch(&[("PARMA_RANK", "0"), ("PARMA_WORLD_SIZE", "1"), ("PARMA_RENDEZVOUS", "[::1]:7000")]);
    assert_eq!(l.rendezvous(), &addr("::1", 7000));
    assert_eq!(l.rendezvous().to_string(), "[::1]:7000");
}

#[test]
fn the_first_launcher_wins() {
    let parma = [("PARMA_RANK", "1"), ("PARMA_WORLD_SIZE", "2"), ("PARMA_RENDEZVOUS", "h:1")];
    let torch = [("RANK", "3"), ("WORLD_SIZE", "8"), ("MASTER_ADDR", "master"), ("MASTER_PORT", "29500")];
    let slurm = [
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "6"),
        ("SLURM_JOB_NODELIST", "n[3-4]"),
        ("SLURM_JOB_ID", "1"),
    ];
    let ompi = [("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "3")];
    let pmi = [("PMI_RANK", "2"), ("PMI_SIZE", "3")];
    let ps = [
        ("DMLC_ROLE", "server"),
        ("DMLC_NUM_SERVER", "2"),
        ("DMLC_PS_ROOT_URI", "s"),
        ("DMLC_PS_ROOT_PORT", "9"),
    ];
    let order: [(&[(&str, &str)], Launcher); 6] = [
        (&parma, Launcher::Parma),
        (&torch, Launcher::Torchrun),
        (&slurm, Launcher::Slurm),
        (&ompi, Launcher::OpenMpi),
        (&pmi, Launcher::Mpich),
        (&ps, Launcher::PsLite),
    ];
    for first in 0..order.len() {
        let mut vars: Vec<(&str, &str)> =
            order[first..].iter().flat_map(|(v, _)| v.iter().copied()).collect();
        // The MPI launchers need PARMA_RENDEZVOUS, which overrides every other address.
        if first >= 3 {
            vars.push(("PARMA_RENDEZVOUS", "r:5"));
        }
        assert_eq!(launch(&vars).launcher(), order[first].1, "{vars:?}");
    }
    assert!(error(&[("PATH", "/bin")]).starts_with("no launcher found"));
}

#[test]
fn torchrun_variables() {
    let l =
        launch(&[("RANK", "3"), ("WORLD_SIZE", "8"), ("MASTER_ADDR", "master"), ("MASTER_PORT", "29500")]);
    // torch keeps MASTER_PORT (its store); parma's rendezvous is at the next port.
    assert_eq!((l.rank(), l.world(), l.rendezvous()), (Some(NodeId(3)), 8, &addr("master", 29501)));
    let l = launch(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "m"),
        ("MASTER_PORT", "29500"),
        ("PARMA_RENDEZVOUS_PORT", "29700"),
    ]);
    assert_eq!(l.rendezvous(), &addr("m", 29700));
    let e = error(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "m"), ("MASTER_PORT", "65535")]);
    assert!(e.contains("PARMA_RENDEZVOUS_PORT"), "{e}");
    let e = error(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "m"),
        ("MASTER_PORT", "1"),
        ("PARMA_RENDEZVOUS_PORT", "0"),
    ]);
    assert!(e.contains("PARMA_RENDEZVOUS_PORT=\"0\""), "{e}");
    let e = error(&[("RANK", "3"), ("WORLD_SIZE", "8"), ("MASTER_PORT", "29500")]);
    assert!(e.starts_with("MASTER_ADDR is not set (launched by torchrun)"), "{e}");
    let e = error(&[("RANK", "3"), ("WORLD_SIZE", "8"), ("MASTER_ADDR", "m"), ("MASTER_PORT", "http")]);
    assert!(e.contains("MASTER_ADDR/MASTER_PORT=\"m:http\"") && e.contains("1 to 65535"), "{e}");
    // PARMA_RENDEZVOUS moves parma's rendezvous off torch's port.
    let l = launch(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "m"),
        ("MASTER_PORT", "1"),
        ("PARMA_RENDEZVOUS", "m:2"),
    ]);
    assert_eq!(l.rendezvous(), &addr("m", 2));
}

#[test]
fn slurm_variables() {
    let base = [("SLURM_PROCID", "1"), ("SLURM_NTASKS", "4"), ("SLURM_JOB_NODELIST", "node[07-09,12],gpu5")];
    let l = launch(&base);
    assert_eq!((l.launcher(), l.rank(), l.world()), (Launcher::Slurm, Some(NodeId(1)), 4));
    assert_eq!(l.rendezvous(), &addr("node07", SLURM_PORT_BASE));
    let mut v = base.to_vec();
    v.push(("SLURM_JOB_ID", "123456"));
    assert_eq!(
        launch(&v).rendezvous().port,
        SLURM_PORT_BASE + (123_456 % u32::from(SLURM_PORT_SPREAD)) as u16
    );
    v.push(("PARMA_RENDEZVOUS_PORT", "4242"));
    assert_eq!(launch(&v).rendezvous(), &addr("node07", 4242));
    v.push(("SLURM_STEP_NODELIST", "node[08-09]"));
    assert_eq!(launch(&v).rendezvous(), &addr("node08", 4242));
    let mut v = base.to_vec();
    v.push(("PARMA_RENDEZVOUS_PORT", "0"));
    assert!(error(&v).starts_with("PARMA_RENDEZVOUS_PORT=\"0\""));
    let e = error(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "4"), ("SLURM_JOB_NODELIST", "node[07-")]);
    assert!(e.starts_with("SLURM_JOB_NODELIST=\"node[07-\": unbalanced"), "{e}");
    let e = error(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "4")]);
    assert!(e.starts_with("SLURM_JOB_NODELIST is not set (launched by slurm)"), "{e}");
    let e = error(&[("SLURM_PROCID", "1"), ("SLURM_JOB_NODELIST", "n1")]);
    assert!(e.starts_with("SLURM_NTASKS is not set"), "{e}");
    let l = launch(&[("SLURM_PROCID", "1"), ("SLURM_NPROCS", "2"), ("SLURM_JOB_NODELIST", "n1")]);
    assert_eq!(l.world(), 2);
}

#[test]
fn mpi_needs_parma_rendezvous() {
    for (rank, size, launcher) in [
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", Launcher::OpenMpi),
        ("PMI_RANK", "PMI_SIZE", Launcher::Mpich),
    ] {
        let e = error(&[(rank, "1"), (size, "3")]);
        assert!(e.starts_with(&format!("PARMA_RENDEZVOUS is not set (launched by {launcher})")), "{e}");
        assert!(e.contains("set PARMA_RENDEZVOUS to rank 0's host"), "{e}");
        let l = launch(&[(rank, "1"), (size, "3"), ("PARMA_RENDEZVOUS", "head:9000")]);
        assert_eq!((l.launcher(), l.rank(), l.world()), (launcher, Some(NodeId(1)), 3));
        assert_eq!(l.rendezvous(), &addr("head", 9000));
        let e = error(&[(rank, "1"), ("PARMA_RENDEZVOUS", "head:9000")]);
        assert!(e.starts_with(&format!("{size} is not set")), "{e}");
    }
}

#[test]
fn ps_lite_roles_and_no_rank() {
    let base = [
        ("DMLC_NUM_SERVER", "3"),
        ("DMLC_NUM_WORKER", "3"),
        ("DMLC_PS_ROOT_URI", "10.1.1.1"),
        ("DMLC_PS_ROOT_PORT", "9091"),
    ];
    for (role, expect) in [("server", Role::Node), ("scheduler", Role::Scheduler), ("worker", Role::Worker)] {
        let mut v = base.to_vec();
        v.extend([("DMLC_ROLE", role), ("DMLC_NODE_HOST", "10.1.1.7")]);
        let l = launch(&v);
        assert_eq!((l.launcher(), l.role(), l.rank(), l.world()), (Launcher::PsLite, expect, None, 3));
        assert_eq!(l.rendezvous(), &addr("10.1.1.1", 9091));
        assert_eq!(l.advertised_host(), Some("10.1.1.7"));
    }
    let mut v = base.to_vec();
    v.push(("DMLC_ROLE", "master"));
    let e = error(&v);
    assert!(e.starts_with("DMLC_ROLE=\"master\": expected server"), "{e}");
    let e = error(&[("DMLC_ROLE", "server"), ("DMLC_NUM_SERVER", "3"), ("DMLC_PS_ROOT_PORT", "9091")]);
    assert!(e.starts_with("DMLC_PS_ROOT_URI is not set (launched by ps-lite)"), "{e}");
}

#[test]
fn numbers_are_checked_and_errors_name_the_variable() {
    let with = |rank: &str, world: &str| {
        error(&[("PARMA_RANK", rank), ("PARMA_WORLD_SIZE", world), ("PARMA_RENDEZVOUS", "h:1")])
    };
    assert_eq!(with("4", "4"), "PARMA_RANK=\"4\": the rank must be below the world size 4");
    assert_eq!(with("-1", "4"), "PARMA_RANK=\"-1\": not a number");
    assert_eq!(with("0", "0"), "PARMA_WORLD_SIZE=\"0\": the world size must be from 1 to 4096");
    assert_eq!(with("0", "4097"), "PARMA_WORLD_SIZE=\"4097\": the world size must be from 1 to 4096");
    assert_eq!(with("0", "99999999999999999999"), "PARMA_WORLD_SIZE=\"99999999999999999999\": not a number");
    assert_eq!(with("x", "2"), "PARMA_RANK=\"x\": not a number");
    assert!(launch(&[("PARMA_RANK", " 1 "), ("PARMA_WORLD_SIZE", "4096 "), ("PARMA_RENDEZVOUS", "h:1")])
        .rank()
        .is_some());
    let e = error(&[("PARMA_RANK", "1"), ("PARMA_RENDEZVOUS", "h:1")]);
    assert!(e.starts_with("PARMA_WORLD_SIZE is not set (launched by parma)"), "{e}");
    let e = error(&[("PARMA_RANK", "1"), ("PARMA_WORLD_SIZE", "2")]);
    assert!(
        e.contains("PARMA_RENDEZVOUS is not set") && e.contains("e.g. PARMA_RENDEZVOUS=node01:29600"),
        "{e}"
    );
    let e = error(&[("SLURM_PROCID", "9"), ("SLURM_NTASKS", "4"), ("SLURM_JOB_NODELIST", "n1")]);
    assert_eq!(e, "SLURM_PROCID=\"9\": the rank must be below the world size 4");
}

#[test]
fn rendezvous_addresses_parse_or_say_why() {
    assert_eq!(RendezvousAddr::parse("node01:29600"), Ok(addr("node01", 29600)));
    assert_eq!(RendezvousAddr::parse("[fe80::1]:1"), Ok(addr("fe80::1", 1)));
    for (bad, why) in [
        ("node01", "expected host:port"),
        ("::1:80", "[addr]:port"),
        ("[::1]80", "[addr]:port"),
        (":80", "empty"),
        ("h:0", "1 to 65535"),
        ("h:65536", "1 to 65535"),
        ("h :1", "spaces"),
    ] {
        let e = RendezvousAddr::parse(bad).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
    let e = error(&[("PARMA_RANK", "0"), ("PARMA_WORLD_SIZE", "1"), ("PARMA_RENDEZVOUS", "nowhere")]);
    assert_eq!(e, "PARMA_RENDEZVOUS=\"nowhere\": expected host:port");
}

#[test]
fn overrides() {
    let l = Launch::explicit(NodeId(1), 3, "127.0.0.1:5000").unwrap().with_advertised_host("10.0.0.2");
    assert_eq!(
        (l.launcher(), l.rank(), l.world(), l.advertised_host()),
        (Launcher::Explicit, Some(NodeId(1)), 3, Some("10.0.0.2"))
    );
    assert_eq!(
        Launch::explicit(NodeId(3), 3, "h:1").unwrap_err().to_string(),
        "--rank=\"3\": the rank must be below the world size 3"
    );
    assert!(Launch::explicit(NodeId(0), 0, "h:1").unwrap_err().to_string().starts_with("--world-size=\"0\""));
    assert!(Launch::explicit(NodeId(0), 1, "h").unwrap_err().to_string().starts_with("--rendezvous=\"h\""));
    let l = launch(&[
        ("PARMA_RANK", "0"),
        ("PARMA_WORLD_SIZE", "1"),
        ("PARMA_RENDEZVOUS", "h:1"),
        ("PARMA_ADVERTISE_HOST", "me"),
    ]);
    assert_eq!(l.advertised_host(), Some("me"));
    // An empty variable counts as unset.
    let l = launch(&[
        ("PARMA_RANK", ""),
        ("PARMA_WORLD_SIZE", ""),
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("MASTER_ADDR", "m"),
        ("MASTER_PORT", "1"),
    ]);
    assert_eq!(l.launcher(), Launcher::Torchrun);
}
