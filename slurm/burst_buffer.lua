--[[
Eddy as Slurm's burst buffer (BurstBufferType=burst_buffer/lua).

Install as burst_buffer.lua beside slurm.conf and burst_buffer.conf (Directive=EDDY); see
docs/guide/slurm-admin.md. Every slurm_bb_* function only calls `eddy bb <phase>` with the
arguments it needs; the work, and its tests, are in eddy. A phase that fails returns
slurm.ERROR with the last line eddy printed (its error), which Slurm shows to the user:
sbatch's message for job_process, the job's Reason for the others.

Slurm 22.05 passes the arguments named here; later versions append uid, gid and job_info,
which these functions ignore (Lua drops extra arguments), so the script serves both.

job_process, pools and paths run inside slurmctld and must be quick: eddy answers them from
the job script and its settings alone. The others run in slurmscriptd, bounded by the
timeouts of burst_buffer.conf.
--]]

-- Site settings: the eddy program and its burst-buffer settings file.
local EDDY = "/usr/bin/eddy"
local SITE = "/etc/eddy/bb.toml"

-- One shell word.
local function quote(s)
	return "'" .. string.gsub(tostring(s), "'", "'\\''") .. "'"
end

-- The last non-empty line of a text.
local function last_line(text)
	local last = nil
	for line in string.gmatch(text, "[^\n]+") do
		if string.match(line, "%S") then
			last = line
		end
	end
	return last
end

-- Bound in seconds on the phases that run inside slurmctld (job_process, pools, paths and
-- the status of `scontrol show bbstat`): slurmctld waits on them.
local SYNC_TIMEOUT = 10

-- Runs `eddy bb --site SITE <args...>`: slurm.SUCCESS and what it printed, or slurm.ERROR
-- and its error line. `user_words` (of `scontrol show bbstat`) follow a `--`, so that no
-- word of a user is read as an option of eddy's. A `bound` runs eddy under timeout(1).
local function run(bound, args, user_words)
	local words = {}
	if bound then
		words = { "timeout", "--kill-after=1", tostring(bound) }
	end
	for _, w in ipairs({ quote(EDDY), "bb", "--site", quote(SITE) }) do
		words[#words + 1] = w
	end
	for i = 1, args.n do
		words[#words + 1] = quote(args[i])
	end
	if user_words then
		words[#words + 1] = "--"
		for i = 1, user_words.n do
			words[#words + 1] = quote(user_words[i])
		end
	end
	local cmd = table.concat(words, " ") .. ' 2>&1; echo "eddy-exit:$?"'
	local pipe = io.popen(cmd)
	if pipe == nil then
		return slurm.ERROR, "eddy: cannot run " .. EDDY
	end
	local out = pipe:read("*a") or ""
	pipe:close()
	local body, code = string.match(out, "^(.-)eddy%-exit:(%d+)%s*$")
	if code == nil then
		return slurm.ERROR, "eddy: " .. EDDY .. " gave no exit status"
	end
	if tonumber(code) == 0 then
		return slurm.SUCCESS, body
	end
	local msg = last_line(body) or ("eddy bb exited with status " .. code)
	if bound and (tonumber(code) == 124 or tonumber(code) == 137) then
		msg = "eddy bb " .. tostring(args[1]) .. " took more than " .. bound .. " s and was stopped"
	end
	slurm.log_error("eddy bb %s: %s", tostring(args[1]), body)
	return slurm.ERROR, msg
end

-- The arguments of a call as a list that keeps its length (a nil among them included).
local function list(...)
	return { n = select("#", ...), ... }
end

local function eddy(...)
	return run(nil, list(...))
end

local function eddy_sync(...)
	return run(SYNC_TIMEOUT, list(...))
end

-- For the phases whose success carries no value.
local function status_only(rc, msg)
	if rc == slurm.SUCCESS then
		return rc
	end
	return rc, msg
end

function slurm_bb_job_process(job_script)
	return status_only(eddy_sync("job-process", job_script))
end

function slurm_bb_pools()
	return eddy_sync("pools")
end

function slurm_bb_job_teardown(job_id, job_script, hurry)
	return status_only(eddy("teardown", job_id, job_script, hurry))
end

function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script)
	return status_only(eddy("setup", job_id, uid, gid, pool or "", bb_size or "0", job_script))
end

function slurm_bb_data_in(job_id, job_script)
	return status_only(eddy("data-in", job_id, job_script))
end

function slurm_bb_real_size(job_id)
	return status_only(eddy("real-size", job_id))
end

function slurm_bb_paths(job_id, job_script, path_file)
	return status_only(eddy_sync("paths", job_id, job_script, path_file))
end

function slurm_bb_pre_run(job_id, job_script)
	return status_only(eddy("pre-run", job_id, job_script))
end

function slurm_bb_post_run(job_id, job_script)
	return status_only(eddy("post-run", job_id, job_script))
end

function slurm_bb_data_out(job_id, job_script)
	return status_only(eddy("data-out", job_id, job_script))
end

function slurm_bb_get_status(...)
	return run(SYNC_TIMEOUT, list("status"), list(...))
end
