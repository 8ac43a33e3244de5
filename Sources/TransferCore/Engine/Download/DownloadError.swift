import Foundation

/// Why a download did not finish, each case naming what the user can do.
public enum DownloadError: Error, CustomStringConvertible, Sendable {
    /// The destination exists and the policy is to refuse.
    case destinationExists(path: String)
    /// The server answered with an error status that retrying will not fix (or retries ran out).
    case httpStatus(status: Int, url: String, message: String, reason: String?)
    /// A network failure that persisted through the retries.
    case transport(TransportError, reason: String)
    /// The finished file does not have the expected SHA-256.
    case checksumMismatch(path: String, expected: String, actual: String)
    /// The finished file does not have the checksum the server published with it
    /// (`PublishedChecksum`): which algorithm, from which header, expected and got.
    case publishedChecksumMismatch(path: String, algorithm: String, header: String, expected: String, actual: String)
    /// The job names a SHA256SUMS list that cannot give this file's checksum: no line for the
    /// name, or two lines with different values.
    case notInChecksumList(list: String, name: String, ambiguous: Bool)
    /// Pieces of the finished file kept failing their hashes (a metalink's) after being fetched
    /// again: how many of how many, the first, and the mirrors that served them.
    case piecesMismatch(path: String, failing: Int, of: Int, first: Int, suspects: [String])
    /// The finished file is not as long as the server said.
    case sizeMismatch(path: String, expected: Int64, actual: Int64)
    /// A local file problem (disk full, permissions).
    case local(POSIXFailure)
    /// The remote file kept changing while being downloaded.
    case unstableSource(url: String, restarts: Int, lastChange: String)
    /// Another process is writing the partial file (the same destination downloaded twice at once).
    case partInUse(path: String)
    /// A file at the partial file's (or its record's) name that transferd cannot prove it wrote:
    /// left alone, never truncated, renamed or removed.
    case foreignPartial(path: String)
    /// The destination's file name is one transferd keeps for its own files, or too long (`PartialNames.refusal`).
    case reservedDestination(path: String, reason: String)

    public var description: String {
        switch self {
        case .destinationExists(let path):
            return "\(path) already exists and was left alone; to replace it use --overwrite (a job: \"overwrite\": \"overwrite\"), to keep it use --skip-existing (a job: \"overwrite\": \"skip\")"
        case .httpStatus(let status, let url, let message, let reason):
            let detail = message.isEmpty ? "" : ": \(message)"
            let why = reason.map { " (\($0))" } ?? ""
            return "HTTP \(status) from \(url)\(detail)\(why)"
        case .transport(let error, let reason):
            return "\(error) — \(reason)"
        case .checksumMismatch(let path, let expected, let actual):
            return "SHA-256 mismatch for \(path): expected \(expected), got \(actual); the file was removed — check the checksum or the source"
        case .notInChecksumList(let list, let name, let ambiguous):
            return ambiguous
                ? "the checksum list \(list) gives two different SHA-256 values for \(name); nothing was downloaded — fix the list, or give the job's sha256 yourself"
                : "the checksum list \(list) has no line for \(name); nothing was downloaded — name the list that covers this file, or the name it is listed under (checksums_name)"
        case .publishedChecksumMismatch(let path, let algorithm, let header, let expected, let actual):
            return "\(path) does not match the \(algorithm) checksum the server published in \(header): expected \(expected), got"
                + " \(actual); the file was removed — fetch it again (the copy may have been damaged on the way), or tell the"
                + " server's operator if it fails again"
        case .piecesMismatch(let path, let failing, let total, let first, let suspects):
            let from = suspects.isEmpty ? "" : " (served by \(suspects.joined(separator: ", ")))"
            return "\(failing) of the \(total) pieces of \(path) still fail their hashes after being fetched again (first: "
                + "piece \(first))\(from); the file was removed — check the metalink, or leave out the mirrors named"
        case .sizeMismatch(let path, let expected, let actual):
            return "\(path) has \(actual) bytes but the server announced \(expected)"
        case .local(let failure):
            return failure.description
        case .unstableSource(let url, let restarts, let lastChange):
            return "\(url) started over \(restarts) times during the download (last: \(lastChange)); nothing was saved "
                + "as the file — try again once the remote file stops changing"
        case .foreignPartial(let path):
            return "\(path) exists and transferd has no record of writing it (no checkpoint, no tag of its own); it was left "
                + "alone — move it away (or delete it if it is an old partial file), or choose another destination"
        case .reservedDestination(let path, let reason):
            return "cannot save to \(path): \(reason); choose another name (-o, or the job's \"dest\")"
        case .partInUse(let path):
            return "\(path) is being written by another transferd process (a `get` or a queue run to the same destination); "
                + "nothing was changed — wait for it to finish, or choose another destination"
        }
    }
}
