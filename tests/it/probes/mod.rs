//! The probes in user space and their verdicts: HTTP(S) over sockets against real servers and a
//! zoo of odd ones, `probed check` as an operator runs it, and a node out of descriptors.
mod agent;
mod cli_check;
mod grpc;
mod http;
mod http_conformance;
mod keep_alive;
mod local_errors;
mod tls_verify;
mod tunnel;
