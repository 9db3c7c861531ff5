//! `GET /metrics` read as samples. The Prometheus text format is one
//! sample a line (`name{label="value",…} value`), so a small parser does;
//! the crate for it (`prometheus-parse`) brings regex and chrono along.
//! A series the server does not expose is an error, never a zero: a test
//! that reads a renamed counter fails instead of comparing 0 with 0.

use anyhow::{anyhow, bail, Context, Result};
use std::fmt;

/// One sample: a metric name, its labels, its value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// The samples of one `GET /metrics` answer.
#[derive(Debug, Clone)]
pub struct Metrics {
    samples: Vec<Sample>,
    text: String,
}

impl Metrics {
    /// Parses Prometheus text; an error names the line it cannot read.
    pub fn parse(text: &str) -> Result<Self> {
        let samples = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| sample(line).with_context(|| format!("metrics line {line:?}")))
            .collect::<Result<_>>()?;
        Ok(Self {
            samples,
            text: text.to_owned(),
        })
    }

    /// The value of the one series `name` whose labels are exactly
    /// `labels` (in any order). An error when there is no such series.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> Result<f64> {
        let mut wanted: Vec<(&str, &str)> = labels.to_vec();
        wanted.sort_unstable();
        let found = self.samples.iter().find(|s| {
            let mut have: Vec<(&str, &str)> = s
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            have.sort_unstable();
            s.name == name && have == wanted
        });
        match found {
            Some(sample) => Ok(sample.value),
            None => Err(anyhow!(
                "no series {name}{} in GET /metrics:\n{}",
                Labels(labels),
                self.series_named(name)
            )),
        }
    }

    /// The raw text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The lines of the series called `name`, or the whole text when there
    /// is none: what an error message should show.
    fn series_named(&self, name: &str) -> String {
        let lines: Vec<&str> = self
            .text
            .lines()
            .filter(|line| line.starts_with(name))
            .collect();
        if lines.is_empty() {
            format!("(no series named {name})\n{}", self.text)
        } else {
            lines.join("\n")
        }
    }
}

/// `{a="b",c="d"}` for messages; nothing for no labels.
struct Labels<'a>(&'a [(&'a str, &'a str)]);

impl fmt::Display for Labels<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        let inner: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        write!(f, "{{{}}}", inner.join(","))
    }
}

/// `name{labels} value [timestamp]`.
fn sample(line: &str) -> Result<Sample> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or_else(|| anyhow!("no value"))?;
    let name = line[..name_end].to_owned();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = label_set(inner)?;
        labels = parsed;
        rest = after;
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or_else(|| anyhow!("no value"))?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().with_context(|| format!("value {other:?}"))?,
    };
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// The labels after `{`, up to and including `}`; and what follows.
fn label_set(mut rest: &str) -> Result<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (key, after) = rest
            .split_once("=\"")
            .ok_or_else(|| anyhow!("a label without =\""))?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => bail!("a label value ends in \\"),
                },
                Some((_, c)) => value.push(c),
                None => bail!("an unterminated label value"),
            }
        };
        labels.push((key.trim().to_owned(), value));
        rest = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP idempotency_requests_total Keyed requests by outcome.
# TYPE idempotency_requests_total counter
idempotency_requests_total{outcome="executed"} 3
idempotency_requests_total{outcome="replayed"} 49
idempotency_records_expired_total 0
http_request_duration_seconds_bucket{le="+Inf",path="/a \"b\", c"} 7
# EOF
"#;

    #[test]
    fn a_series_is_read_by_name_and_exact_labels() {
        let m = Metrics::parse(TEXT).unwrap();
        let executed = m.counter("idempotency_requests_total", &[("outcome", "executed")]);
        assert_eq!(executed.unwrap(), 3.0);
        assert_eq!(
            m.counter("idempotency_records_expired_total", &[]).unwrap(),
            0.0
        );
        let bucket = m.counter(
            "http_request_duration_seconds_bucket",
            &[("path", "/a \"b\", c"), ("le", "+Inf")],
        );
        assert_eq!(bucket.unwrap(), 7.0);
    }

    #[test]
    fn a_missing_series_is_an_error_not_zero() {
        let m = Metrics::parse(TEXT).unwrap();
        for (name, labels) in [
            ("idempotency_requests_total", &[("outcome", "conflict")][..]),
            ("idempotency_requests_total", &[]),
            ("idempotency_requests", &[("outcome", "executed")]),
            ("idempotency_records_expired_total", &[("outcome", "x")]),
        ] {
            let err = m.counter(name, labels).unwrap_err().to_string();
            assert!(err.starts_with("no series"), "{name}: {err}");
        }
    }

    #[test]
    fn a_line_that_is_not_a_sample_is_an_error() {
        for bad in ["name", "name{a=\"b\" 1", "name{a=b} 1", "name one"] {
            assert!(Metrics::parse(bad).is_err(), "{bad:?}");
        }
    }
}
