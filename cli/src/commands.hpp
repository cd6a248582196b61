// Subcommands of the `trainplan` CLI. Each cmd_<name>.cpp defines one add_<name>_command()
// that declares its options on `app` and sets the callback that runs it. Callbacks throw
// trainplan::Error for bad input; main() prints it once and exits 1.
//
// Exit codes: 0 success; 1 bad input or infeasible request; 2 internal error (a bug);
// 3 the request's deadline or budget is not met by any plan (the best plan is still written).
#pragma once

#include <CLI/CLI.hpp>

namespace trainplan::cli {

/// Options every command shares.
struct GlobalOptions {
  bool verbose = false;
  std::string catalog_dir;   // read hwprofiles from this folder instead of the built-in one
  std::string price_file;    // user price overrides
  std::string region;        // --region: price every instance in this AWS region (empty: a plan's own, else us-east-1)
  int exit_status = 0;       // set by a command that finished but must exit non-zero (kExitObjectiveMissed)
};
/// Exit code of a search whose deadline or budget no plan meets.
inline constexpr int kExitObjectiveMissed = 3;
GlobalOptions& global_options();

/// Thrown by a command that ends with a specific exit status (not an error message): main()
/// returns `code`. `trainplan execute` interrupted by SIGTERM exits kExitInterrupted.
struct ExitStatus {
  int code = 0;
};
/// "Interrupted, resumable": the run stopped on SIGTERM / SIGUSR1 after a step and committed a
/// checkpoint (EX_TEMPFAIL of sysexits.h: try again later, i.e. --resume).
inline constexpr int kExitInterrupted = 75;

void add_catalog_command(CLI::App& app);
void add_model_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_check_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_validate_command(CLI::App& app);
void add_job_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_execute_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_history_command(CLI::App& app);
void add_launch_command(CLI::App& app);

}  // namespace trainplan::cli
