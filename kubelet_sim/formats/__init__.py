"""Data formats and small values: quantities, durations, JSON, strategic merge patch, PEM,
histograms, a bounded memo."""
