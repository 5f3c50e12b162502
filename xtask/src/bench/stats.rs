//! Statistics of the repetitions: median, nearest-rank percentile, and a list for the report.

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
