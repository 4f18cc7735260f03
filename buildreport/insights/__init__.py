"""Figures derived from builds: statistics, percentiles, charts and exports of build lists."""
