/// transferd's exit codes, documented in docs/exit-codes.md.
struct ExitCode: Equatable {
    let rawValue: Int32

    /// Everything asked for is done.
    static let success = ExitCode(rawValue: 0)
    /// A transfer failed: network, server or HTTP error after retries.
    static let transferFailed = ExitCode(rawValue: 1)
    /// The command line or configuration is wrong.
    static let usage = ExitCode(rawValue: 2)
    /// The file arrived but failed verification (SHA-256 or size).
    static let verificationFailed = ExitCode(rawValue: 3)
    /// A local file problem: disk full, permission denied, unwritable destination.
    static let localError = ExitCode(rawValue: 4)
    /// The destination exists and neither --overwrite nor --skip-existing was given.
    static let destinationExists = ExitCode(rawValue: 5)
    /// Stopped by SIGINT/SIGTERM; the transfer is resumable.
    static let interrupted = ExitCode(rawValue: 130)
}
