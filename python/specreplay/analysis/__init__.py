"""One run's figures: summaries, validity findings, SLO verdicts, resampled intervals."""
