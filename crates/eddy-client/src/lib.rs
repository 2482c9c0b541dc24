//! eddy-client (work in progress).
