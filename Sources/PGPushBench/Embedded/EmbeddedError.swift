/// A failure of the embedded machinery (the demo's and the benchmark's child processes); its description is
/// shown to the user.
struct EmbeddedError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
