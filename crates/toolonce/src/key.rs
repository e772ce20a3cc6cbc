//! Operation keys — being written.
