//! Writing the ring in Chrome's trace event format (JSON object form),
//! which `chrome://tracing`, Perfetto and `torch.profiler`'s viewers open.
//!
//! Host threads are threads of the process's own pid; each device is a
//! process of its own ("device N", pid [`DEVICE_PID_BASE`] + N) whose
//! threads are its streams.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::tracks::{stream_name, thread_name};
use crate::{Arg, Event, Phase, Track};

/// The pid of device 0's process in the trace (device N is this + N).
pub(crate) const DEVICE_PID_BASE: i64 = 1 << 24;

/// Writes the ring (after collecting pending device times) to `path`;
/// returns how many events it wrote.
pub fn dump(path: impl AsRef<Path>) -> io::Result<usize> {
    let path = path.as_ref();
    let file = File::create(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let mut w = BufWriter::new(file);
    let n = write_to(&mut w)?;
    w.flush()?;
    Ok(n)
}

/// The ring as a trace document.
pub fn to_json() -> String {
    let mut out = Vec::new();
    write_to(&mut out).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Writes the ring as a trace document to `w`; returns how many events it
/// wrote (not counting the track names).
pub fn write_to(w: &mut impl Write) -> io::Result<usize> {
    let events = crate::snapshot();
    let dropped = crate::dropped();
    let host_pid = i64::from(std::process::id());
    let mut tracks = BTreeSet::new();
    w.write_all(b"{\"traceEvents\":[\n")?;
    let mut first = true;
    for e in &events {
        tracks.insert(track_key(e.track));
        if !first {
            w.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *w, &event_json(e, host_pid))?;
    }
    let mut devices = BTreeSet::new();
    for key in &tracks {
        let (pid, tid, name) = match *key {
            (0, n, _) => (host_pid, n, thread_name(n as u32)),
            (1, d, s) => {
                devices.insert(d);
                (device_pid(d as i32), s as i64, stream_name(d as i32, s))
            }
            _ => continue,
        };
        if !first {
            w.write_all(b",\n")?;
        }
        first = false;
        let m = json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                       "args": {"name": name}});
        serde_json::to_writer(&mut *w, &m)?;
    }
    let mut processes = vec![(host_pid, "dipu host".to_owned(), 0)];
    for d in devices {
        processes.push((device_pid(d as i32), format!("dipu device {d}"), d + 1));
    }
    for (pid, name, sort) in processes {
        if !first {
            w.write_all(b",\n")?;
        }
        first = false;
        let m = json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": name}});
        serde_json::to_writer(&mut *w, &m)?;
        let s = json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                       "args": {"sort_index": sort}});
        w.write_all(b",\n")?;
        serde_json::to_writer(&mut *w, &s)?;
    }
    write!(
        w,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"producer\":\"dipu-rs {}\",\
         \"events\":{},\"dropped\":{}}}}}\n",
        env!("CARGO_PKG_VERSION"),
        events.len(),
        dropped
    )?;
    Ok(events.len())
}

/// A sortable key for a track: threads first, then streams by device.
fn track_key(t: Track) -> (u8, i64, u64) {
    match t {
        Track::Thread(n) => (0, i64::from(n), 0),
        Track::Stream { device, stream } => (1, i64::from(device), stream),
    }
}

fn device_pid(device: i32) -> i64 {
    DEVICE_PID_BASE + i64::from(device)
}

/// Microseconds (Chrome's unit) with nanosecond precision.
fn us(ns: u64) -> Value {
    json!(ns as f64 / 1000.0)
}

fn event_json(e: &Event, host_pid: i64) -> Value {
    let (pid, tid) = match e.track {
        Track::Thread(n) => (host_pid, i64::from(n)),
        Track::Stream { device, stream } => (device_pid(device), stream as i64),
    };
    let mut o = Map::new();
    o.insert("name".into(), json!(e.name));
    o.insert("cat".into(), json!(e.cat.as_str()));
    o.insert("pid".into(), json!(pid));
    o.insert("tid".into(), json!(tid));
    o.insert("ts".into(), us(e.ts_ns));
    match e.phase {
        Phase::Complete { dur_ns } => {
            o.insert("ph".into(), json!("X"));
            o.insert("dur".into(), us(dur_ns));
        }
        Phase::Instant => {
            o.insert("ph".into(), json!("i"));
            o.insert("s".into(), json!("t"));
        }
        Phase::FlowStart(id) => {
            o.insert("ph".into(), json!("s"));
            o.insert("id".into(), json!(id));
        }
        Phase::FlowEnd(id) => {
            o.insert("ph".into(), json!("f"));
            o.insert("bp".into(), json!("e"));
            o.insert("id".into(), json!(id));
        }
    }
    let mut args = Map::new();
    for (k, v) in e.args.iter() {
        let v = match v {
            Arg::U64(x) => json!(x),
            Arg::I64(x) => json!(x),
            Arg::Hex(x) => json!(format!("{x:#x}")),
            Arg::Str(s) => json!(s),
        };
        args.insert(k.into(), v);
    }
    if !args.is_empty() {
        o.insert("args".into(), Value::Object(args));
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::tests::LOCK;
    use crate::{Args, Category};

    #[test]
    fn writes_slices_flows_and_named_tracks() {
        let _l = LOCK.lock();
        crate::clear();
        crate::start();
        let me = Track::current_thread();
        let s = Track::stream(1, 0x40);
        crate::name_stream(1, 0x40, "copy stream");
        crate::complete(
            "malloc",
            Category::Vendor,
            me,
            1_500,
            2_000,
            Args::new().u64("bytes", 512).hex("ptr", 0xabc),
        );
        crate::record(Event {
            name: "event_record",
            cat: Category::Stream,
            phase: Phase::FlowStart(7),
            track: s,
            ts_ns: 4_000,
            args: Args::new(),
        });
        crate::record(Event {
            name: "event_record",
            cat: Category::Stream,
            phase: Phase::FlowEnd(7),
            track: me,
            ts_ns: 5_000,
            args: Args::new(),
        });
        crate::stop();
        let doc: Value = serde_json::from_str(&to_json()).unwrap();
        let evs = doc["traceEvents"].as_array().unwrap();
        let malloc = evs.iter().find(|e| e["name"] == "malloc").unwrap();
        assert_eq!(malloc["ph"], "X");
        assert_eq!(malloc["ts"], 1.5);
        assert_eq!(malloc["dur"], 2.0);
        assert_eq!(malloc["args"]["bytes"], 512);
        assert_eq!(malloc["args"]["ptr"], "0xabc");
        let flows: Vec<_> = evs.iter().filter(|e| e["id"] == 7).collect();
        assert_eq!(flows.len(), 2);
        assert_eq!(flows[0]["ph"], "s");
        assert_eq!(
            (flows[1]["ph"].clone(), flows[1]["bp"].clone()),
            (json!("f"), json!("e"))
        );
        assert_eq!(flows[0]["pid"], DEVICE_PID_BASE + 1);
        let names: Vec<_> = evs
            .iter()
            .filter(|e| e["ph"] == "M")
            .map(|e| e["args"]["name"].as_str().unwrap_or("").to_owned())
            .collect();
        assert!(names.contains(&"copy stream".to_owned()), "{names:?}");
        assert!(names.contains(&"dipu device 1".to_owned()), "{names:?}");
        assert_eq!(doc["otherData"]["events"], 3);
        crate::clear();
    }

    #[test]
    fn dump_writes_a_file_and_reports_a_bad_path() {
        let _l = LOCK.lock();
        crate::clear();
        crate::start();
        crate::instant("empty_cache", Category::Allocator, Args::new());
        crate::stop();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        assert_eq!(dump(&path).unwrap(), 1);
        let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(doc["traceEvents"][0]["name"], "empty_cache");
        let err = dump(dir.path().join("no/such/dir/t.json")).unwrap_err();
        assert!(err.to_string().contains("no/such/dir"), "{err}");
        crate::clear();
    }
}
