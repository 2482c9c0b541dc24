//! eddy-bench (work in progress).
