-- The node inventory: one row per node, its storage paths and its network interfaces.
CREATE TABLE nodes (
    node TEXT PRIMARY KEY,
    collected_at INTEGER NOT NULL,
    cores INTEGER NOT NULL,
    mem_total_bytes INTEGER NOT NULL,
    mem_available_bytes INTEGER NOT NULL
);
CREATE TABLE storage (
    node TEXT NOT NULL REFERENCES nodes(node),
    path TEXT NOT NULL,
    mount_point TEXT, fs_type TEXT, device TEXT, disk TEXT, class TEXT,
    capacity_bytes INTEGER, free_bytes INTEGER, available_bytes INTEGER,
    write_mib_s REAL, read_mib_s REAL, error TEXT,
    PRIMARY KEY (node, path)
);
CREATE TABLE interfaces (
    node TEXT NOT NULL REFERENCES nodes(node),
    name TEXT NOT NULL,
    mac TEXT, ipv4 TEXT NOT NULL, ipv6 TEXT NOT NULL, mtu INTEGER, speed_mbps INTEGER,
    up INTEGER NOT NULL, operstate TEXT,
    PRIMARY KEY (node, name)
);
