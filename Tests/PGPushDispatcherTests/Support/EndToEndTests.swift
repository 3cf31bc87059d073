import Testing

/// The end-to-end suites (worker processes, the simulator, PostgreSQL) run one test at a time: each one
/// alone already keeps a two-core machine busy, and their timings would mean nothing side by side.
@Suite(.database, .serialized)
enum EndToEndTests {}
