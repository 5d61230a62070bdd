"""Decide: the rule applied to every gem, factor and period, with its evidence."""
