//! When each unit (a request, or a session's first turn) is due in an
//! open-loop point. Arrivals come from a seeded arrival process, or from the
//! trace's own offsets; the schedule is computed one unit at a time as units
//! are fed, so neither a `--duration` run nor a streamed trace needs a list
//! up front.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, Gamma};

use super::spec::{Arrival, LoadMode};

enum Gaps {
    Constant(f64),
    Exp(Exp<f64>),
    Gamma(Gamma<f64>),
    /// The trace's offsets scaled by 1/speedup.
    Trace(TraceClock),
}

/// Speedup mode: a unit is due at its arrival minus time zero (the first
/// arrival), divided by the speedup. Each loop over the trace is shifted by
/// the first loop's span plus one mean gap, so loops do not overlap.
struct TraceClock {
    speedup: f64,
    /// Time zero: the earliest arrival (given), else the first one seen.
    zero_s: Option<f64>,
    /// Of the first loop: the largest offset and how many units it had.
    lap0_span_s: f64,
    lap0_units: u64,
}

impl TraceClock {
    fn offset_s(&mut self, arrival_s: f64, lap: u64) -> f64 {
        let zero = *self.zero_s.get_or_insert(arrival_s);
        let offset = arrival_s - zero;
        if lap == 0 {
            self.lap0_span_s = self.lap0_span_s.max(offset);
            self.lap0_units += 1;
            return offset / self.speedup;
        }
        // Units of a later loop come after the whole first loop was fed.
        let mean_gap = if self.lap0_units > 1 {
            self.lap0_span_s / (self.lap0_units - 1) as f64
        } else {
            1.0
        };
        (offset + lap as f64 * (self.lap0_span_s + mean_gap)) / self.speedup
    }
}

/// The open-loop schedule of a point.
pub struct Schedule {
    gaps: Gaps,
    rng: ChaCha8Rng,
    next_index: u64,
    clock_s: f64,
}

impl Schedule {
    /// Returns `None` for closed-loop modes, which have no schedule.
    pub fn open_loop(load: LoadMode, seed: u64) -> Option<Schedule> {
        let gaps = match load {
            LoadMode::Rate {
                rate,
                arrival: Arrival::Constant,
                ..
            } => Gaps::Constant(1.0 / rate),
            LoadMode::Rate {
                rate,
                arrival: Arrival::Poisson,
                ..
            } => Gaps::Exp(Exp::new(rate).ok()?),
            LoadMode::Rate {
                rate,
                arrival: Arrival::Gamma,
                burstiness,
            } => {
                // Shape = burstiness, mean = 1/rate (as vLLM's benchmark does).
                Gaps::Gamma(Gamma::new(burstiness, 1.0 / (rate * burstiness)).ok()?)
            }
            LoadMode::Speedup { speedup } => Gaps::Trace(TraceClock {
                speedup,
                zero_s: None,
                lap0_span_s: 0.0,
                lap0_units: 0,
            }),
            LoadMode::Concurrency { .. } => return None,
        };
        Some(Schedule {
            gaps,
            rng: ChaCha8Rng::seed_from_u64(seed),
            next_index: 0,
            clock_s: 0.0,
        })
    }

    /// Speedup mode with every arrival known up front: time zero is the
    /// earliest of them, wherever it is in the trace.
    pub fn with_time_zero(mut self, zero_s: f64) -> Self {
        if let Gaps::Trace(clock) = &mut self.gaps {
            clock.zero_s = Some(zero_s);
        }
        self
    }

    /// When the next unit is due, µs after the point's start: the unit's
    /// trace arrival and loop (lap) count in speedup mode; rate modes ignore
    /// both.
    pub fn next_offset_us(&mut self, arrival_s: f64, lap: u64) -> i64 {
        let index = self.next_index;
        let at_s = match &mut self.gaps {
            Gaps::Trace(clock) => clock.offset_s(arrival_s, lap),
            // The first unit goes at 0; every later one one gap after the previous.
            _ if index == 0 => 0.0,
            Gaps::Constant(gap) => self.clock_s + *gap,
            Gaps::Exp(d) => self.clock_s + d.sample(&mut self.rng),
            Gaps::Gamma(d) => self.clock_s + d.sample(&mut self.rng),
        };
        self.clock_s = at_s;
        self.next_index += 1;
        (at_s * 1e6).round() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(rate: f64, arrival: Arrival, burstiness: f64) -> LoadMode {
        LoadMode::Rate {
            rate,
            arrival,
            burstiness,
        }
    }

    fn offsets(load: LoadMode, n: u64, seed: u64) -> Vec<i64> {
        let mut s = Schedule::open_loop(load, seed).unwrap();
        (0..n).map(|_| s.next_offset_us(0.0, 0)).collect()
    }

    #[test]
    fn constant_rate_is_evenly_spaced() {
        assert_eq!(
            offsets(rate(4.0, Arrival::Constant, 1.0), 4, 0),
            vec![0, 250_000, 500_000, 750_000]
        );
    }

    #[test]
    fn poisson_mean_gap_matches_rate_and_seed_repeats() {
        let a = offsets(rate(100.0, Arrival::Poisson, 1.0), 20_001, 7);
        let mean_gap = *a.last().unwrap() as f64 / 20_000.0;
        assert!(
            (mean_gap - 10_000.0).abs() < 300.0,
            "mean gap {mean_gap} µs"
        );
        assert_eq!(a, offsets(rate(100.0, Arrival::Poisson, 1.0), 20_001, 7));
        assert_ne!(a, offsets(rate(100.0, Arrival::Poisson, 1.0), 20_001, 8));
    }

    #[test]
    fn gamma_burstiness_changes_spread_not_mean() {
        let gaps = |b: f64| {
            let o = offsets(rate(50.0, Arrival::Gamma, b), 20_001, 3);
            let g: Vec<f64> = o.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
            let mean = g.iter().sum::<f64>() / g.len() as f64;
            let var = g.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / g.len() as f64;
            (mean, var.sqrt() / mean)
        };
        let (mean_bursty, cv_bursty) = gaps(0.25);
        let (mean_smooth, cv_smooth) = gaps(4.0);
        assert!((mean_bursty - 20_000.0).abs() < 1_500.0, "{mean_bursty}");
        assert!((mean_smooth - 20_000.0).abs() < 500.0, "{mean_smooth}");
        // Coefficient of variation of a gamma is 1/sqrt(shape): 2.0 and 0.5.
        assert!((cv_bursty - 2.0).abs() < 0.2, "{cv_bursty}");
        assert!((cv_smooth - 0.5).abs() < 0.05, "{cv_smooth}");
    }

    /// The offsets of `n` units looping over `arrivals`, as the feed asks for them.
    fn looped(arrivals: &[f64], speedup: f64, n: usize, zero: Option<f64>) -> Vec<i64> {
        let mut s = Schedule::open_loop(LoadMode::Speedup { speedup }, 0).unwrap();
        if let Some(z) = zero {
            s = s.with_time_zero(z);
        }
        (0..n)
            .map(|i| s.next_offset_us(arrivals[i % arrivals.len()], (i / arrivals.len()) as u64))
            .collect()
    }

    #[test]
    fn speedup_scales_trace_offsets_and_loops() {
        // Span 3 s + mean gap 1.5 s = 4.5 s per lap, halved by the speedup.
        let want = vec![0, 500_000, 1_500_000, 2_250_000, 2_750_000];
        assert_eq!(looped(&[10.0, 11.0, 13.0], 2.0, 5, None), want);
        assert_eq!(looped(&[10.0, 11.0, 13.0], 2.0, 5, Some(10.0)), want);
        // One unit: a lap is its span (0) plus a mean gap of 1 s.
        assert_eq!(looped(&[5.0], 1.0, 3, None), vec![0, 1_000_000, 2_000_000]);
    }

    #[test]
    fn time_zero_is_the_earliest_arrival_when_known() {
        // Arrivals out of order (a trace given whole may be): zero is the
        // earliest, and the span the largest offset from it.
        assert_eq!(
            looped(&[11.0, 10.0, 13.0], 1.0, 4, Some(10.0)),
            vec![1_000_000, 0, 3_000_000, 5_500_000]
        );
    }

    #[test]
    fn closed_loop_has_no_schedule() {
        assert!(Schedule::open_loop(LoadMode::Concurrency { concurrency: 2 }, 0).is_none());
    }
}
