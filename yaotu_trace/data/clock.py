"""Which clock a time is on: Unix seconds, or seconds from an origin near zero.

Light on purpose (no pandas): the renderers read it to write a moment as a date.
"""

from __future__ import annotations

from typing import Final

# A clock reading at or above this (2001-09-09 in Unix seconds) is Unix time; a trace does not
# run for 31 years, so a clock that starts below it started near zero.
UNIX_CLOCK_S: Final = 1e9

# The last second a date can be written for (9999-12-31 23:59:59 UTC, Python's `datetime.max`):
# a reading past it is on no calendar, so it is written as seconds.
LAST_DATE_S: Final = 253_402_300_799.0
