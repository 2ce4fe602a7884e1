//! The suite's report: counts, a table, and the details below it.

use std::fmt;
use std::time::Duration;

use crate::{CheckResult, Outcome};

/// What [`crate::run`] found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The vendor's name.
    pub vendor: String,
    /// One result per check run, in order.
    pub results: Vec<CheckResult>,
    /// How long the whole run took.
    pub elapsed: Duration,
}

impl Report {
    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.results.iter().filter(|r| f(&r.outcome)).count()
    }

    /// Checks that passed.
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Passed))
    }

    /// Checks that failed.
    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Failed(_)))
    }

    /// Checks that were skipped (the machine has no device).
    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skipped(_)))
    }

    /// True when no check failed.
    pub fn success(&self) -> bool {
        self.failed() == 0
    }

    /// The results of the checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &CheckResult> {
        self.results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Failed(_)))
    }

    /// `"N passed, M failed, K skipped in X.XX s"`.
    pub fn summary(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped in {:.2} s",
            self.passed(),
            self.failed(),
            self.skipped(),
            self.elapsed.as_secs_f64()
        )
    }
}

/// The table (`check | result | time (ms)`), then the notes, failure
/// messages and skip reasons.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const CHECK: &str = "check";
        const RESULT: &str = "result";
        const TIME: &str = "time (ms)";
        let width = self
            .results
            .iter()
            .map(|r| r.name.len())
            .chain([CHECK.len()])
            .max()
            .unwrap_or(0);
        let (rw, tw) = (RESULT.len().max(7), TIME.len());
        writeln!(f, "{CHECK:<width$} | {RESULT:<rw$} | {TIME:>tw$}")?;
        writeln!(f, "{:-<width$}-+-{:-<rw$}-+-{:->tw$}", "", "", "")?;
        for r in &self.results {
            let ms = r.duration.as_secs_f64() * 1000.0;
            writeln!(
                f,
                "{:<width$} | {:<rw$} | {ms:>tw$.1}",
                r.name,
                r.outcome.label()
            )?;
        }
        let mut section = |title: &str, lines: Vec<(&str, &str)>| -> fmt::Result {
            if lines.is_empty() {
                return Ok(());
            }
            writeln!(f, "\n{title}:")?;
            for (name, text) in lines {
                writeln!(f, "  {name}: {text}")?;
            }
            Ok(())
        };
        let notes = self
            .results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Passed))
            .flat_map(|r| r.notes.iter().map(|n| (r.name, n.as_str())))
            .collect();
        section("notes", notes)?;
        let by_kind = |pick: fn(&Outcome) -> Option<&str>| -> Vec<(&str, &str)> {
            self.results
                .iter()
                .filter_map(|r| pick(&r.outcome).map(|m| (r.name, m)))
                .collect()
        };
        let failures = by_kind(|o| match o {
            Outcome::Failed(m) => Some(m.as_str()),
            _ => None,
        });
        let skipped = by_kind(|o| match o {
            Outcome::Skipped(m) => Some(m.as_str()),
            _ => None,
        });
        section("failures", failures)?;
        section("skipped", skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: &'static str, outcome: Outcome, notes: &[&str]) -> CheckResult {
        CheckResult {
            name,
            outcome,
            notes: notes.iter().map(|s| s.to_string()).collect(),
            duration: Duration::from_micros(1500),
        }
    }

    #[test]
    fn table_counts_and_summary() {
        let report = Report {
            vendor: "test".into(),
            results: vec![
                result("a::one", Outcome::Passed, &["a note"]),
                result("b::two_longer", Outcome::Failed("broke".into()), &[]),
                result("c::three", Outcome::Skipped("no device: none".into()), &[]),
            ],
            elapsed: Duration::from_millis(2346),
        };
        assert_eq!(
            (report.passed(), report.failed(), report.skipped()),
            (1, 1, 1)
        );
        assert!(!report.success());
        assert_eq!(report.summary(), "1 passed, 1 failed, 1 skipped in 2.35 s");
        let text = report.to_string();
        assert!(
            text.starts_with("check         | result  | time (ms)\n"),
            "{text}"
        );
        assert!(
            text.contains("a::one        | passed  |       1.5\n"),
            "{text}"
        );
        assert!(text.contains("b::two_longer | FAILED  |"), "{text}");
        assert!(text.contains("notes:\n  a::one: a note\n"), "{text}");
        assert!(
            text.contains("failures:\n  b::two_longer: broke\n"),
            "{text}"
        );
        assert!(
            text.contains("skipped:\n  c::three: no device: none\n"),
            "{text}"
        );
    }
}
