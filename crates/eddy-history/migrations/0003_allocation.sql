-- The allocation a run got (the burst buffer's pool mode, decision 0038): its rule
-- (`scaled`, `isolated`, `default`), copied beside the profile's JSON (which holds the whole
-- allocation: servers, hosts, reasons) so that a site can count runs by rule. NULL for rows
-- stored before it and for runs allocated by nothing; old rows stay readable as they were.
ALTER TABLE profiles ADD COLUMN alloc_rule TEXT;
CREATE INDEX profiles_alloc_rule ON profiles (alloc_rule);
