import Testing

/// The end-to-end suites (worker processes, the simulator, PostgreSQL) run one test at a time within a test
/// process. `scripts/test` runs several such processes side by side, each with its share of the suites: every
/// test has its own database, simulator ports and worker processes, so they share the machine but nothing else,
/// and their margins allow for a busy machine.
@Suite(.database, .serialized)
enum EndToEndTests {}
