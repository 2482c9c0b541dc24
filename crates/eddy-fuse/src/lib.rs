//! eddy-fuse (work in progress).
