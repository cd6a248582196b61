// trainplan: plan, simulate, run and cost distributed deep-learning training.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <exception>
#include <functional>

#include "allocator.hpp"
#include "commands.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"
#include "trainplan/executor/registry.hpp"

namespace trainplan::cli {

GlobalOptions& global_options() {
  static GlobalOptions options;
  return options;
}

namespace {

// Asks the registry, so it runs only when --version is given: each backend, whether it is
// usable here and, when not, why (module not found and where it was looked for, the dlopen
// error, no driver, no device).
std::string version_text() {
  namespace ex = trainplan::executor;
  std::string s = fmt::format("trainplan {}\n", TRAINPLAN_VERSION);
  s += fmt::format("backends: {}\n", trainplan::join(ex::backend_names(), ", "));
  for (const ex::BackendInfo& b : ex::backend_infos()) {
    std::string from = b.origin;
    if (!b.build.empty()) from += fmt::format(" ({})", b.build);
    if (b.available)
      s += fmt::format("  {}: available, {}: {}\n", b.name, from, b.description);
    else
      s += fmt::format("  {}: unavailable: {}\n", b.name, b.why_unavailable);
  }
  s += fmt::format("backend modules are looked for in: {} (TRAINPLAN_BACKEND_PATH replaces this list)\n",
                   trainplan::join(ex::backend_module_search_path(), ", "));
  s += fmt::format("CUDA toolkit at build time: {}\n", TRAINPLAN_CUDA_SUMMARY);
  s += fmt::format("allocator: {}", allocator_text());  // CLI11 adds the newline
  return s;
}

}  // namespace
}  // namespace trainplan::cli

int main(int argc, char** argv) {
  using namespace trainplan::cli;
  CLI::App app{"trainplan: plan, simulate, run and cost distributed deep-learning training on cloud GPUs"};
  app.name("trainplan");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::function<std::string()>(version_text));
  app.footer(
      "Exit codes: 0 success; 1 bad input or infeasible request (one `error:` line naming the file and JSON pointer or the\n"
      "flag, and a hint); 2 internal error (a bug); 3 no plan meets the --deadline or --budget (the best plan is still\n"
      "written, and stderr says by how much it misses).");
  auto& g = global_options();
  app.add_flag("-v,--verbose", g.verbose, "Print stage timings and details");
  app.add_option("--catalog-dir", g.catalog_dir, "Read the hardware catalog from this folder instead of the built-in one");
  app.add_option("--prices", g.price_file, "JSON file of prices that override the catalog's (other regions, negotiated prices); applies on top of --region");
  app.add_option("--region", g.region,
                 "AWS region whose prices and availability to use (default us-east-1, or the region a plan file records; "
                 "`trainplan catalog --regions` lists them); types not offered there are left out of searches");
  app.fallthrough();

  add_catalog_command(app);
  add_model_command(app);
  add_plan_command(app);
  add_check_command(app);
  add_simulate_command(app);
  add_validate_command(app);
  add_job_command(app);
  add_report_command(app);
  add_execute_command(app);
  add_export_command(app);
  add_bench_command(app);
  add_calibrate_command(app);
  add_history_command(app);
  add_launch_command(app);

  try {
    // A mistyped command would otherwise read as a stray argument.
    if (argc > 1 && argv[1][0] != '-') {
      std::vector<std::string> names;
      for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
      if (std::find(names.begin(), names.end(), argv[1]) == names.end())
        throw trainplan::Error(fmt::format("unknown command \"{}\"", argv[1]))
            .hint(trainplan::suggestion(argv[1], names) + " (`trainplan --help` lists the commands)");
    }
    app.parse(argc, argv);
  } catch (const ExitStatus& s) {
    return s.code;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s \xE2\x80\x94 run `trainplan --help` (or `trainplan <command> --help`) for usage\n", e.what());
    return 1;
  } catch (const trainplan::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of host memory \xE2\x80\x94 try a smaller search (fewer instance types or --max-gpus)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal error: %s \xE2\x80\x94 this is a bug in trainplan; please report it with the command line\n", e.what());
    return 2;
  }
  // Output to a full disk or a closed pipe is an error too, not a silent success.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "error: <stdout>: write failed: %s \xE2\x80\x94 check the free space or where the output goes\n",
                 std::strerror(errno));
    return 1;
  }
  return g.exit_status;
}
