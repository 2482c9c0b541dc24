//! eddy-daemon: the Eddy storage daemon (work in progress).
