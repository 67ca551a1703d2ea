"""What the reward's bound and attack tests score: a tiny database of two questions, and queries that
run away (a runaway SQLite can stop, a call it cannot)."""

SCRIPT = """
CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
INSERT INTO singer VALUES (1, 'Ann', 'France', 52), (2, 'Bo', 'France', 43), (3, 'Cy', 'Peru', 41);
CREATE TABLE stadium (id INTEGER PRIMARY KEY, name TEXT);
INSERT INTO stadium VALUES (1, 'Big'), (2, 'Small');
"""
GOLD = "SELECT name FROM singer WHERE country = 'France'"
OTHER_GOLD = "SELECT count(*) FROM stadium"
"""The gold of another question: its completions go to another chunk."""
RUNAWAY = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
"""Runs until its step budget or its guard stops it inside SQLite."""
INSTR = (
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 1000000) "
    "SELECT sum(instr(printf('%.262000c', 'a') || x, printf('%.131000c', 'a') || 'b')) FROM r"
)
"""The dearest call the default value limit allows (under a second of one core) on every row: SQLite's
progress handler, called every 1,000 steps, comes about once a minute, so only the worker's guard stops it
in time. (A single call over megabytes, which took hours, is refused at the default limits.)"""
