"""Calibrate: the rule's error rates and power, by simulation through the shipped rule functions."""
