-- The history's one table: a job profile per row, keyed by the profile's key (the Slurm job
-- id, else `<deployment>@<start>`). The columns beside `profile` are copies of the profile's
-- fields that queries filter and sort by; `profile` holds the whole profile as JSON (the
-- serde form of eddy_history::JobProfile), the one source of truth a reader decodes.
-- SQL that SQLite and PostgreSQL both accept (decision 0033); `user` and `end` are reserved
-- words in PostgreSQL, hence user_name and end_time.
CREATE TABLE profiles (
    key         TEXT PRIMARY KEY,
    job_id      TEXT,
    job_name    TEXT,
    user_name   TEXT NOT NULL,
    script_hash TEXT,
    start_time  DOUBLE PRECISION NOT NULL,
    end_time    DOUBLE PRECISION NOT NULL,
    source      TEXT NOT NULL,
    io_mode     TEXT NOT NULL,
    volume      BIGINT NOT NULL,
    profile     TEXT NOT NULL
);
CREATE INDEX profiles_start ON profiles (start_time);
