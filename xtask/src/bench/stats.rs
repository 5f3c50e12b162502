//! Statistics of the repetitions: median, nearest-rank percentile, a list for the report,
//! and the median ratio of paired runs with its interval.

pub(super) fn median(v: &[f64]) -> f64 {
    pct(v, 50.0)
}

/// Nearest-rank percentile.
pub(super) fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize;
    s[rank.min(s.len()) - 1]
}

pub(super) fn list(v: &[f64], decimals: usize) -> String {
    v.iter().map(|x| format!("{x:.decimals$}")).collect::<Vec<_>>().join(", ")
}

/// The median of the ratios `with[i] / without[i]` of paired runs, and a distribution-free
/// interval for it: the k-th smallest and k-th largest ratio, where k is chosen from the
/// binomial distribution (each ratio falls below the true median with probability ½)
/// for a coverage of at least 95 % where the pairs allow it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct PairedRatio {
    pub median: f64,
    pub low: f64,
    pub high: f64,
    /// The probability that [low, high] holds the true median (0.94 for 5 pairs, ≥ 0.95 from 6).
    pub coverage: f64,
    pub pairs: usize,
}

/// How a paired ratio compares with a target ceiling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The whole interval is at or under the target.
    Met,
    /// The whole interval is over it.
    Missed,
    /// The interval spans it: more pairs, or a quieter machine, would tell.
    Unresolved,
}

impl PairedRatio {
    /// `None` without pairs; extra runs on either side (there should be none) are left out.
    pub(super) fn of(with: &[f64], without: &[f64]) -> Option<Self> {
        let mut ratios: Vec<f64> = with.iter().zip(without).map(|(w, b)| w / b).collect();
        ratios.sort_by(f64::total_cmp);
        let n = ratios.len();
        if n == 0 {
            return None;
        }
        let median = if n % 2 == 1 { ratios[n / 2] } else { (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0 };
        // coverage(k) = 1 − 2·P(B ≤ k−1), B ~ Binomial(n, ½); the largest k ≥ 1 with ≥ 95 %.
        let below = |k: usize| (0..k).map(|i| binomial(n, i)).sum::<f64>() / 2f64.powi(n as i32);
        let coverage = |k: usize| 1.0 - 2.0 * below(k);
        let mut k = 1;
        while k < n.div_ceil(2) && coverage(k + 1) >= 0.95 {
            k += 1;
        }
        Some(Self { median, low: ratios[k - 1], high: ratios[n - k], coverage: coverage(k), pairs: n })
    }

    pub(super) fn verdict(&self, ceiling: f64) -> Verdict {
        if self.high <= ceiling {
            Verdict::Met
        } else if self.low > ceiling {
            Verdict::Missed
        } else {
            Verdict::Unresolved
        }
    }

    /// "1.012× (95 % interval 0.998–1.021, 25 pairs)".
    pub(super) fn describe(&self) -> String {
        format!(
            "{:.3}× ({:.0} % interval {:.3}–{:.3}, {} pairs)",
            self.median,
            (self.coverage * 100.0).floor(),
            self.low,
            self.high,
            self.pairs
        )
    }
}

/// n choose k, as a float (n is a count of pairs: small).
fn binomial(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_comes_from_the_order_statistics_the_binomial_allows() {
        // 5 pairs: only the extremes, which cover the median with 1 − 2/32 = 93.75 %.
        let five = PairedRatio::of(&[1.3, 1.0, 1.2, 1.1, 1.4], &[1.0; 5]).unwrap();
        assert_eq!((five.low, five.median, five.high), (1.0, 1.2, 1.4));
        assert!((five.coverage - 0.9375).abs() < 1e-12);
        // 25 pairs: the 8th smallest and 8th largest (P(B ≤ 7) = 0.0216 for n = 25).
        let with: Vec<f64> = (1..=25).map(f64::from).collect();
        let ratio = PairedRatio::of(&with, &[1.0; 25]).unwrap();
        assert_eq!((ratio.low, ratio.median, ratio.high, ratio.pairs), (8.0, 13.0, 18.0, 25));
        assert!(ratio.coverage >= 0.95 && ratio.coverage < 0.96, "{}", ratio.coverage);
        assert_eq!(ratio.describe(), "13.000× (95 % interval 8.000–18.000, 25 pairs)");
        // 15 pairs (the VM's): the 4th to the 12th, 1 − 2·576/32768 = 96.5 %.
        let with: Vec<f64> = (1..=15).map(f64::from).collect();
        let ratio = PairedRatio::of(&with, &[1.0; 15]).unwrap();
        assert_eq!((ratio.low, ratio.high), (4.0, 12.0));
        assert!((ratio.coverage - (1.0 - 2.0 * 576.0 / 32768.0)).abs() < 1e-12);
    }

    #[test]
    fn ratios_are_taken_within_pairs() {
        // Each pair at a different speed, the agent costing 10 % in every one: the ratio
        // is 1.10 and its interval has no width.
        let without = [1.0, 1.2, 1.6, 1.6, 1.0, 1.2];
        let with = without.map(|s| s * 1.1);
        let ratio = PairedRatio::of(&with, &without).unwrap();
        assert!((ratio.median - 1.1).abs() < 1e-9 && (ratio.high - ratio.low).abs() < 1e-9, "{ratio:?}");
        assert_eq!(PairedRatio::of(&[], &[]), None);
    }

    #[test]
    fn the_verdict_needs_the_whole_interval_on_one_side() {
        let ratio = |low, high| PairedRatio { median: (low + high) / 2.0, low, high, coverage: 0.95, pairs: 25 };
        assert_eq!(ratio(0.99, 1.01).verdict(1.01), Verdict::Met);
        assert_eq!(ratio(1.011, 1.2).verdict(1.01), Verdict::Missed);
        assert_eq!(ratio(0.995, 1.02).verdict(1.01), Verdict::Unresolved);
    }
}
