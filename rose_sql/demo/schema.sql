-- Demo schema for ROSE-SQL: a made-up amateur cycling league (written for this demo).
-- Seasons 2024 and 2025; points 25-18-15-12-10-8-6-4-2-1 for places 1 to 10.

CREATE TABLE teams (
  team_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  city TEXT NOT NULL,
  founded INTEGER                                   -- NULL: founding year unknown
);

CREATE TABLE riders (
  rider_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,                               -- not unique: two riders are called Sam Keller
  team_id INTEGER REFERENCES teams (team_id),       -- NULL: independent rider
  birth_year INTEGER NOT NULL,
  country TEXT NOT NULL,                            -- ISO 3166 alpha-2 code
  weight_kg REAL                                    -- NULL: not declared
);

CREATE TABLE races (
  race_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,                               -- not unique: some races are held every year
  race_date TEXT NOT NULL,                          -- ISO date YYYY-MM-DD
  kind TEXT NOT NULL CHECK (kind IN ('road', 'gravel', 'time trial')),
  distance_km REAL NOT NULL,
  climb_m TEXT                                      -- metres of climbing, as text (NULL: not measured)
);

CREATE TABLE results (
  race_id INTEGER NOT NULL REFERENCES races (race_id),
  rider_id INTEGER NOT NULL REFERENCES riders (rider_id),
  position INTEGER,                                 -- finishing place; NULL: did not finish
  time_s INTEGER,                                   -- finishing time in seconds; NULL: did not finish
  points INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (race_id, rider_id)
);
