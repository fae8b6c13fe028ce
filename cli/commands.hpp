#pragma once

namespace kvroom::cli {

/// `kvroom demo`: a prefill and a decode group in one process, N rooms over
/// real registered buffers, one injected failure. Returns the exit code.
int run_demo(int argc, char** argv);

/// `kvroom stress`: rooms under a seeded fault schedule, invariants checked.
int run_stress(int argc, char** argv);

/// `kvroom serve`: one rank in its own process, joined through the
/// bootstrap registry, running a synthetic scheduler over a room range.
int run_serve(int argc, char** argv);

/// `kvroom registry`: the bootstrap registry as its own, restartable process.
int run_registry(int argc, char** argv);

/// `kvroom top`: a terminal view of ranks' /metrics.
int run_top(int argc, char** argv);

/// `kvroom doctor`: every transport, available or not, and why.
int run_doctor(int argc, char** argv);

} // namespace kvroom::cli
