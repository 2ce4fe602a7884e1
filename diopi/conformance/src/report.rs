//! Per-operator results, as a table with a summary line or as JSON.

use std::fmt::Write as _;

/// One failed run of a case.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The case (inputs and attributes).
    pub case: String,
    /// The variant (`contiguous`, `strided inputs`, ...).
    pub variant: &'static str,
    /// What went wrong.
    pub message: String,
}

/// The outcome of one operator.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Every run of every case passed.
    Passed,
    /// Some runs failed.
    Failed(Vec<Failure>),
    /// The library lacks the function.
    Missing,
}

/// One operator's line of the report.
#[derive(Clone, Debug)]
pub struct OpResult {
    /// DIOPI name.
    pub name: &'static str,
    /// Cases built.
    pub cases: usize,
    /// Calls made (cases times variants).
    pub runs: usize,
    /// Wall time building and running the cases, in seconds.
    pub seconds: f64,
    /// What happened.
    pub outcome: Outcome,
}

/// The whole run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The library tested.
    pub library: String,
    /// Per operator, in table order.
    pub ops: Vec<OpResult>,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Failures printed per operator in the table (all of them in JSON).
const SHOWN: usize = 3;

impl Report {
    /// Whether no operator failed (missing ones do not fail).
    pub fn success(&self) -> bool {
        self.counts().1 == 0
    }

    /// (passed, failed, not in library).
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut c = (0, 0, 0);
        for op in &self.ops {
            match op.outcome {
                Outcome::Passed => c.0 += 1,
                Outcome::Failed(_) => c.1 += 1,
                Outcome::Missing => c.2 += 1,
            }
        }
        c
    }

    /// `N passed, M failed, K not in library`.
    pub fn summary(&self) -> String {
        let (p, f, m) = self.counts();
        format!(
            "{p} passed, {f} failed, {m} not in library ({:.2} s)",
            self.seconds
        )
    }

    /// The table: one line per operator, failures indented under it.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "library: {}", self.library);
        for op in &self.ops {
            match &op.outcome {
                Outcome::Passed => {
                    let _ = writeln!(
                        s,
                        "  pass     {:<32} {} cases, {} runs, {:.0} ms",
                        op.name,
                        op.cases,
                        op.runs,
                        op.seconds * 1e3
                    );
                }
                Outcome::Missing => {
                    let _ = writeln!(s, "  missing  {:<32} not in library", op.name);
                }
                Outcome::Failed(fails) => {
                    let _ = writeln!(
                        s,
                        "  FAIL     {:<32} {} of {} runs failed",
                        op.name,
                        fails.len(),
                        op.runs
                    );
                    for f in fails.iter().take(SHOWN) {
                        let _ = writeln!(s, "           [{}] {}: {}", f.variant, f.case, f.message);
                    }
                    if fails.len() > SHOWN {
                        let _ = writeln!(
                            s,
                            "           ... {} more (the JSON report lists all)",
                            fails.len() - SHOWN
                        );
                    }
                }
            }
        }
        let missing: Vec<&str> = self
            .ops
            .iter()
            .filter(|o| matches!(o.outcome, Outcome::Missing))
            .map(|o| o.name)
            .collect();
        if !missing.is_empty() {
            let _ = writeln!(s, "not in library: {}", missing.join(" "));
        }
        s
    }

    /// The report as one JSON object.
    pub fn json(&self) -> String {
        let (p, f, m) = self.counts();
        let ops: Vec<String> = self
            .ops
            .iter()
            .map(|op| {
                let (status, fails) = match &op.outcome {
                    Outcome::Passed => ("passed", &[][..]),
                    Outcome::Missing => ("not in library", &[][..]),
                    Outcome::Failed(v) => ("failed", &v[..]),
                };
                let fails: Vec<String> = fails
                    .iter()
                    .map(|x| {
                        format!(
                            "{{\"case\":{},\"variant\":{},\"message\":{}}}",
                            quote(&x.case),
                            quote(x.variant),
                            quote(&x.message)
                        )
                    })
                    .collect();
                format!(
                    "{{\"name\":{},\"status\":{},\"cases\":{},\"runs\":{},\"seconds\":{:.4},\"failures\":[{}]}}",
                    quote(op.name),
                    quote(status),
                    op.cases,
                    op.runs,
                    op.seconds,
                    fails.join(",")
                )
            })
            .collect();
        format!(
            "{{\"library\":{},\"passed\":{p},\"failed\":{f},\"not_in_library\":{m},\"seconds\":{:.3},\"ops\":[{}]}}",
            quote(&self.library),
            self.seconds,
            ops.join(",")
        )
    }
}

/// A JSON string literal.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_json() {
        let r = Report {
            library: "lib\"x\".so".into(),
            ops: vec![
                OpResult {
                    name: "diopiAdd",
                    cases: 2,
                    runs: 8,
                    outcome: Outcome::Passed,
                    seconds: 0.0,
                },
                OpResult {
                    name: "diopiMul",
                    cases: 1,
                    runs: 4,
                    outcome: Outcome::Failed(vec![Failure {
                        case: "f32".into(),
                        variant: "contiguous",
                        message: "bad\n".into(),
                    }]),
                    seconds: 0.0,
                },
                OpResult {
                    name: "diopiExp",
                    cases: 0,
                    runs: 0,
                    outcome: Outcome::Missing,
                    seconds: 0.0,
                },
            ],
            seconds: 0.5,
        };
        assert_eq!(r.summary(), "1 passed, 1 failed, 1 not in library (0.50 s)");
        let j = r.json();
        assert!(
            j.starts_with(
                "{\"library\":\"lib\\\"x\\\".so\",\"passed\":1,\"failed\":1,\"not_in_library\":1"
            ),
            "{j}"
        );
        assert!(j.contains("\"message\":\"bad\\n\""), "{j}");
        let t = r.table();
        assert!(
            t.contains("FAIL     diopiMul") && t.contains("not in library: diopiExp"),
            "{t}"
        );
    }
}
