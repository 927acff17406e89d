//! CUDA graph replays through the fake runtime: each replay's kernels carry the graph's
//! id, their node's id and the correlation id of the cudaGraphLaunch that ran them, and
//! the graph's set-up calls (instantiate, upload) are recorded.

use gputrace_format as fmt;
use gputrace_tests::{Cuda, Layout, Wheel};
use std::collections::BTreeMap;

const REPLAYS: usize = 6;
const NODES: u64 = 4;
const GRAPH_ID: u32 = 3;

fn node(i: u64) -> u64 {
    ((GRAPH_ID as u64) << 32) | (i + 1)
}

#[test]
fn graph_replays_link_kernels_to_their_launch_and_node() {
    for cuda in [Cuda::V13, Cuda::V12] {
        let w = Wheel::new(cuda, Layout::Flat);
        let out = w.app(&["graphs", &REPLAYS.to_string()]).run();
        out.assert_ok();
        assert!(
            out.stdout.contains("graphs: 6 replays of 4 nodes"),
            "{}",
            out.stdout
        );
        let t = out.only_trace();
        t.assert_complete();
        let launches = t.apis_named("cudaGraphLaunch");
        assert_eq!(launches.len(), REPLAYS, "{cuda:?}");
        assert!(launches.iter().all(|a| a.cbid == 311));
        let inst = t.apis_named("cudaGraphInstantiate");
        assert_eq!(inst.len(), 1, "{cuda:?}: instantiate recorded once");
        assert_eq!(inst[0].cbid, 443);
        assert_eq!(t.apis_named("cudaGraphUpload").len(), 1);

        // Kernels by the launch that ran them.
        let mut by_corr: BTreeMap<u32, Vec<&fmt::Kernel>> = BTreeMap::new();
        for k in t.kernels_named("_Z4nodev") {
            by_corr.entry(k.corr).or_default().push(k);
        }
        let corrs: Vec<u32> = launches.iter().map(|a| a.corr).collect();
        assert_eq!(
            by_corr.keys().copied().collect::<Vec<_>>(),
            corrs,
            "{cuda:?}: every replay's kernels carry its launch's correlation id"
        );
        for ks in by_corr.values_mut() {
            ks.sort_by_key(|k| k.start);
            let nodes: Vec<u64> = ks.iter().map(|k| k.graph_node_id).collect();
            assert_eq!(nodes, (0..NODES).map(node).collect::<Vec<_>>(), "{cuda:?}");
            assert!(ks.iter().all(|k| k.graph_id == GRAPH_ID && k.stream == 13));
        }
        // Kernels launched outside the graph have no graph and no node.
        let eager = t.kernels_named("_Z5eagerv");
        assert_eq!(eager.len(), REPLAYS);
        assert!(eager
            .iter()
            .all(|k| k.graph_id == 0 && k.graph_node_id == fmt::ENV_NA64));
    }
}

/// With graph-level tracing (`GPUTRACE_ACTIVITY=...,graph`), each replay is one record
/// with its launch's correlation id and no kernel record is made for its nodes.
#[test]
fn graph_level_tracing_records_one_record_per_replay() {
    for cuda in [Cuda::V13, Cuda::V12] {
        let w = Wheel::new(cuda, Layout::Flat);
        let out = w
            .app(&["graphs", &REPLAYS.to_string()])
            .env(
                "GPUTRACE_ACTIVITY",
                "kernel,memcpy,memset,device,memory,graph",
            )
            .run();
        out.assert_ok();
        assert!(out.stderr.is_empty(), "{}", out.stderr);
        let t = out.only_trace();
        t.assert_complete();
        let replays: Vec<&fmt::GraphTrace> = t
            .events()
            .iter()
            .filter_map(|e| match e {
                fmt::Event::GraphTrace(g) => Some(g),
                _ => None,
            })
            .collect();
        let launches: Vec<u32> = t
            .apis_named("cudaGraphLaunch")
            .iter()
            .map(|a| a.corr)
            .collect();
        assert_eq!(
            replays.iter().map(|g| g.corr).collect::<Vec<_>>(),
            launches,
            "{cuda:?}"
        );
        assert!(replays
            .iter()
            .all(|g| g.graph_id == GRAPH_ID && g.stream == 13 && g.start <= g.end && g.end > 0));
        assert!(
            t.kernels_named("_Z4nodev").is_empty(),
            "{cuda:?}: no node kernels"
        );
        assert_eq!(t.kernels_named("_Z5eagerv").len(), REPLAYS);
    }
}
