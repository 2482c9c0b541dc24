-- The servers' latest health probes (health.rs).
CREATE TABLE health (
    host TEXT PRIMARY KEY,
    bandwidth REAL,
    measured_at INTEGER NOT NULL,
    anomalous INTEGER NOT NULL,
    peer_median REAL,
    error TEXT
);
