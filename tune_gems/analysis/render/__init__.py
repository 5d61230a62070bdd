"""Render: report.md, the terminal tables, the plots and the tables they are drawn from."""
