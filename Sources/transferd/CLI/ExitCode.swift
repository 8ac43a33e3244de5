import Foundation
import TransferCore

/// transferd's exit codes: the one table, and the one place that gives the error that ended
/// a command its code. docs/exit-codes.md lists the same table (ExitCodeTableTests checks it).
struct ExitCode: Equatable, Hashable {
    let rawValue: Int32

    /// Everything asked for is done.
    static let success = ExitCode(rawValue: 0)
    /// A transfer failed: network, server or HTTP error after retries.
    static let transferFailed = ExitCode(rawValue: 1)
    /// The command line or configuration is wrong, or the queue store cannot be used as configured.
    static let usage = ExitCode(rawValue: 2)
    /// The file arrived but failed verification (SHA-256 or size), or an upload's did.
    static let verificationFailed = ExitCode(rawValue: 3)
    /// A local file problem: disk full, permission denied, unwritable destination.
    static let localError = ExitCode(rawValue: 4)
    /// The destination exists and neither --overwrite nor --skip-existing was given.
    static let destinationExists = ExitCode(rawValue: 5)
    /// Stopped by SIGINT/SIGTERM; the transfer is resumable.
    static let interrupted = ExitCode(rawValue: 130)

    /// Every code transferd exits with.
    static let all: [ExitCode] = [.success, .transferFailed, .usage, .verificationFailed, .localError, .destinationExists, .interrupted]

    /// The code for the error that ended a command, whichever command: one cause, one code.
    /// `otherwise` is the code of an error of no cause listed here (a transfer command's
    /// failure, a queue command's local trouble).
    ///
    /// A store that cannot be used as configured — a PostgreSQL store's connection, rights or
    /// schema (`StoreError.unusable`), a SQLite store too new or damaged, a missing queue
    /// folder — is a configuration error (2), as a bad option is: the command changed nothing,
    /// and the message says what to fix.
    static func of(_ error: Error, otherwise: ExitCode) -> ExitCode {
        switch error {
        case is CancellationError: return .interrupted
        case is UsageError, is QueueError, is SyncRefusal: return .usage
        case StoreError.unusable, StoreError.schemaTooNew, StoreError.damaged: return .usage
        case let failure as DownloadError:
            switch failure {
            case .destinationExists: return .destinationExists
            case .checksumMismatch, .publishedChecksumMismatch, .notInChecksumList, .sizeMismatch, .piecesMismatch:
                return .verificationFailed
            case .local, .partInUse, .foreignPartial, .reservedDestination: return .localError
            case .httpStatus, .transport, .unstableSource: return .transferFailed
            }
        case let failure as UploadError:
            switch failure {
            case .local: return .localError
            case .verification: return .verificationFailed
            case .httpStatus, .transport, .sourceChanged: return .transferFailed
            }
        case let failure as S3Error:
            switch failure {
            case .noCredentials, .badEndpoint: return .usage
            case .verification: return .verificationFailed
            default: return .transferFailed
            }
        // A chain set up wrong (a role without source_profile) is configuration; a source that
        // answered no credentials (STS, a credential_process, an endpoint) a failure to transfer.
        case let failure as AWSCredentialError:
            switch failure {
            case .incomplete: return .usage
            case .fetch: return .transferFailed
            }
        case is S3PrefixError: return .transferFailed
        // A request the chosen backend cannot make is a configuration choice; any other a transfer's failure.
        case let failure as TransportError: return failure.kind == .unsupported ? .usage : .transferFailed
        case is POSIXFailure: return .localError
        default: return otherwise
        }
    }
}
