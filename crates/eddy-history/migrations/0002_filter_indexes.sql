-- Indexes for what `eddy history list` filters by and for the allocation's lookup of the
-- previous runs of one application (job name + script hash, newest first: DFRA's history).
CREATE INDEX profiles_app ON profiles (job_name, script_hash, start_time);
CREATE INDEX profiles_user ON profiles (user_name, start_time);
CREATE INDEX profiles_job_id ON profiles (job_id);
