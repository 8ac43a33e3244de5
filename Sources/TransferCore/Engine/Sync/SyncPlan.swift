import Foundation

/// What a bulk copy (a folder to a prefix, a prefix to a prefix) does beyond copying:
/// `--dry-run` (say what would be copied, skipped and deleted, and move nothing) and
/// `--delete` (remove what the destination holds that the source does not).
package struct SyncOptions: Sendable, Equatable {
    package var dryRun = false
    /// Remove from the destination what the source lacks, once every copy succeeded.
    package var delete = false
    /// The most of the destination's entries (taken by the filters) a delete may remove, as a
    /// share (0.5: half); past it, or when it would remove every one, it is refused without `force`.
    package var maxDeleteShare = 0.5
    package var force = false

    package init(dryRun: Bool = false, delete: Bool = false, maxDeleteShare: Double = 0.5, force: Bool = false) {
        self.dryRun = dryRun
        self.delete = delete
        self.maxDeleteShare = maxDeleteShare
        self.force = force
    }
}

/// What a bulk copy would do, as `--dry-run` tells it: names below the prefix or folder.
package struct SyncPreview: Sendable, Equatable {
    package var copy: [(name: String, size: Int64)] = []
    package var unchanged: [String] = []
    package var delete: [String] = []
    /// Why the delete would be refused (`SyncPlan.refusal`): a dry run shows it, a run stops on it.
    package var refusal: String?

    package init() {}

    package static func == (lhs: SyncPreview, rhs: SyncPreview) -> Bool {
        lhs.copy.map(\.name) == rhs.copy.map(\.name) && lhs.copy.map(\.size) == rhs.copy.map(\.size)
            && lhs.unchanged == rhs.unchanged && lhs.delete == rhs.delete && lhs.refusal == rhs.refusal
    }
}

/// A `--delete` refused before anything was copied or deleted (`SyncPlan.refusal`).
package struct SyncRefusal: Error, CustomStringConvertible, Sendable {
    package var reason: String
    package init(reason: String) { self.reason = reason }
    package var description: String { reason }
}

/// Pure decisions of `--delete`, tested without I/O.
package enum SyncPlan {
    /// The destination's names (below its prefix or folder) to delete: those the filter takes
    /// that the source does not hold. Names are compared by their bytes (String equality would
    /// merge names that differ only in Unicode normalisation), sorted by them.
    package static func extraneous(source: Set<Data>, destination: [String], filter: S3PrefixPlan.Filter) -> [String] {
        destination.filter { !source.contains(Data($0.utf8)) && filter.takes($0) }
            .sorted { Data($0.utf8).lexicographicallyPrecedes(Data($1.utf8)) }
    }

    /// Why deleting `count` of the `total` entries the destination holds now (those the filters
    /// take) is refused, or nil: every one of them, or more than `maxDeleteShare` of them, needs `force`.
    package static func refusal(deleting count: Int, of total: Int, options: SyncOptions) -> String? {
        guard count > 0, !options.force else { return nil }
        if count >= total {
            return "--delete would remove all \(count) of the destination's entries: check the source and the filters, "
                + "or add --force (a job: \"force\": true) to delete them"
        }
        let share = Double(count) / Double(max(total, 1))
        guard share > options.maxDeleteShare else { return nil }
        return "--delete would remove \(count) of the destination's \(total) entries (\(Int((share * 100).rounded()))%), "
            + "more than --max-delete \(Int((options.maxDeleteShare * 100).rounded()))%: check the source and the filters, "
            + "or raise --max-delete, or add --force (a job: \"max_delete\", \"force\": true)"
    }
}

extension S3Client {
    /// Deletes `keys` from `bucket`, a thousand per DeleteObjects request (with its Content-MD5,
    /// which S3 requires); throws when the server reports any key it did not delete.
    package func deleteObjects(bucket: String, keys: [String]) async throws {
        var start = 0
        while start < keys.count {
            let batch = Array(keys[start..<min(start + 1000, keys.count)])
            start += batch.count
            var xml = "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>false</Quiet>"
            for key in batch {
                // XML 1.0 carries no other C0 control, and reads a bare CR as a line feed: written as a reference.
                if key.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\t" && $0 != "\n" && $0 != "\r" }) {
                    throw S3Error.verification("s3://\(bucket)/\(HTTPHeaders.visible(key)) cannot be named in a DeleteObjects request "
                                               + "(a control character XML cannot carry); delete it by hand")
                }
                xml += "<Object><Key>\(XMLText.escape(key).replacingOccurrences(of: "\r", with: "&#13;"))</Key></Object>"
            }
            xml += "</Delete>"
            let body = Data(xml.utf8)
            var digest = Digest(.md5)
            body.withUnsafeBytes { digest.update($0) }
            let result = try await sendForResult("DeleteObjects", method: "POST", bucket: bucket, key: "", query: "delete=",
                                                 headers: ["Content-Type": "application/xml",
                                                           "Content-MD5": Data(digest.finalize()).base64EncodedString()],
                                                 body: .data(body), root: "DeleteResult")
            let errors = result.children("Error")
            if let first = errors.first {
                throw S3Error.service(status: 200, code: first.value("Code") ?? "Error",
                                      message: "\(errors.count) of \(batch.count) keys not deleted, the first \(first.value("Key") ?? "?"): "
                                        + (first.value("Message") ?? ""),
                                      operation: "DeleteObjects", endpoint: Redaction.url(configuration.endpoint))
            }
            // Every key must come back deleted: a server that drops some says nothing of them otherwise.
            let deleted = Set(result.children("Deleted").compactMap { $0.child("Key").map { Data($0.text.utf8) } })
            if let missing = batch.first(where: { !deleted.contains(Data($0.utf8)) }) {
                throw S3Error.verification("DeleteObjects at \(Redaction.url(configuration.endpoint)) did not report "
                                           + "s3://\(bucket)/\(HTTPHeaders.visible(missing)) deleted (nor an error for it); "
                                           + "check the bucket, then run the sync again")
            }
        }
    }
}
