//! When each request is due. Open-loop arrivals come from a seeded arrival
//! process (or the trace's own offsets); the schedule is generated lazily, so a
//! `--duration` run with no request limit needs no up-front list.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, Gamma};

use super::spec::{Arrival, LoadMode};

/// One scheduled request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slot {
    /// Position in the point's schedule, from 0.
    pub index: u64,
    /// Which prepared request it sends.
    pub template: usize,
    /// How many times the trace has been looped before this request (0 = first pass).
    pub lap: u64,
    /// Due time in µs after the point's start (open loop only; 0 in closed loop).
    pub offset_us: i64,
}

/// Maps a schedule index onto a prepared request and its lap over the trace.
pub fn slot_template(index: u64, templates: usize) -> (usize, u64) {
    let t = templates as u64;
    ((index % t) as usize, index / t)
}

enum Gaps {
    Constant(f64),
    Exp(Exp<f64>),
    Gamma(Gamma<f64>),
    /// Trace offsets (seconds) scaled by 1/speedup; loops repeat the trace
    /// shifted by its span plus one mean gap, so laps do not overlap.
    Trace {
        offsets_s: Vec<f64>,
        speedup: f64,
        lap_span_s: f64,
    },
}

/// Lazily yields the open-loop schedule of a point.
pub struct Schedule {
    gaps: Gaps,
    rng: ChaCha8Rng,
    templates: usize,
    next_index: u64,
    limit: Option<u64>,
    clock_s: f64,
}

impl Schedule {
    /// `arrivals_s` are the trace's arrival offsets (used by speedup mode).
    /// Returns `None` for closed-loop modes, which have no schedule.
    pub fn open_loop(
        load: LoadMode,
        arrivals_s: &[f64],
        limit: Option<u64>,
        seed: u64,
    ) -> Option<Schedule> {
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
            LoadMode::Speedup { speedup } => {
                let first = arrivals_s.iter().copied().fold(f64::INFINITY, f64::min);
                let offsets_s: Vec<f64> = arrivals_s.iter().map(|a| a - first).collect();
                let span = offsets_s.iter().copied().fold(0.0, f64::max);
                let mean_gap = if offsets_s.len() > 1 {
                    span / (offsets_s.len() - 1) as f64
                } else {
                    1.0
                };
                Gaps::Trace {
                    offsets_s,
                    speedup,
                    lap_span_s: span + mean_gap,
                }
            }
            LoadMode::Concurrency { .. } => return None,
        };
        Some(Schedule {
            gaps,
            rng: ChaCha8Rng::seed_from_u64(seed),
            templates: arrivals_s.len().max(1),
            next_index: 0,
            limit,
            clock_s: 0.0,
        })
    }
}

impl Iterator for Schedule {
    type Item = Slot;

    fn next(&mut self) -> Option<Slot> {
        let index = self.next_index;
        if self.limit.is_some_and(|l| index >= l) {
            return None;
        }
        let (template, lap) = slot_template(index, self.templates);
        let at_s = match &self.gaps {
            Gaps::Trace {
                offsets_s,
                speedup,
                lap_span_s,
            } => (offsets_s[template] + lap as f64 * lap_span_s) / speedup,
            // The first request goes at 0; every later one one gap after the previous.
            _ if index == 0 => 0.0,
            Gaps::Constant(gap) => self.clock_s + gap,
            Gaps::Exp(d) => self.clock_s + d.sample(&mut self.rng),
            Gaps::Gamma(d) => self.clock_s + d.sample(&mut self.rng),
        };
        self.clock_s = at_s;
        self.next_index += 1;
        Some(Slot {
            index,
            template,
            lap,
            offset_us: (at_s * 1e6).round() as i64,
        })
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
        Schedule::open_loop(load, &[0.0; 4], Some(n), seed)
            .unwrap()
            .map(|s| s.offset_us)
            .collect()
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

    #[test]
    fn speedup_scales_trace_offsets_and_loops() {
        let arrivals = [10.0, 11.0, 13.0];
        let s =
            Schedule::open_loop(LoadMode::Speedup { speedup: 2.0 }, &arrivals, Some(5), 0).unwrap();
        let got: Vec<(usize, u64, i64)> = s.map(|s| (s.template, s.lap, s.offset_us)).collect();
        // Span 3 s + mean gap 1.5 s = 4.5 s per lap, halved by the speedup.
        assert_eq!(
            got,
            vec![
                (0, 0, 0),
                (1, 0, 500_000),
                (2, 0, 1_500_000),
                (0, 1, 2_250_000),
                (1, 1, 2_750_000)
            ]
        );
    }

    #[test]
    fn closed_loop_has_no_schedule() {
        assert!(
            Schedule::open_loop(LoadMode::Concurrency { concurrency: 2 }, &[0.0], Some(3), 0)
                .is_none()
        );
    }
}
