//! A fixed-size latency histogram: log-linear buckets, 16 per power of two (within about 6%),
//! small enough to merge across threads and to send from a worker process as text.

use std::time::Duration;

const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) << SUB_BITS;

#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
        }
    }
}

#[allow(clippy::cast_possible_truncation)] // Every value here is below BUCKETS.
fn bucket(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let exp = ns.ilog2();
    let mantissa = (ns >> (exp - SUB_BITS)) & (SUB - 1);
    ((exp - SUB_BITS + 1) as usize) * SUB as usize + mantissa as usize
}

/// The middle of bucket `index`, in nanoseconds.
#[allow(clippy::cast_possible_truncation)] // Every value here is below BUCKETS.
fn middle(index: usize) -> u64 {
    let sub = SUB as usize;
    if index < sub {
        return index as u64;
    }
    let exp = (index / sub) as u32 + SUB_BITS - 1;
    let mantissa = (index % sub) as u64;
    let low = (SUB + mantissa) << (exp - SUB_BITS);
    let width = 1u64 << (exp - SUB_BITS);
    low + width / 2
}

impl Histogram {
    pub fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket(ns)] += 1;
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The latency below which `fraction` of the operations finished.
    pub fn quantile(&self, fraction: f64) -> Duration {
        let total = self.count();
        if total == 0 {
            return Duration::ZERO;
        }
        // A rank in 1..=total.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rank = ((total as f64) * fraction).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Duration::from_nanos(middle(index));
            }
        }
        unreachable!("rank is at most the total")
    }

    /// `index:count` pairs of the non-empty buckets.
    pub fn encode(&self) -> String {
        let pairs: Vec<String> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &count)| count > 0)
            .map(|(index, count)| format!("{index}:{count}"))
            .collect();
        pairs.join(" ")
    }

    pub fn decode(text: &str) -> Histogram {
        let mut histogram = Histogram::default();
        for pair in text.split_whitespace() {
            let (index, count) = pair.split_once(':').expect("index:count");
            histogram.counts[index.parse::<usize>().expect("index")] +=
                count.parse::<u64>().expect("count");
        }
        histogram
    }
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len() % 2 == 0 {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    })
}
