"""Pilot harness: holes cut from real trees, a latency/quality/cost matrix across backends."""
