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

    package init() {}

    package static func == (lhs: SyncPreview, rhs: SyncPreview) -> Bool {
        lhs.copy.map(\.name) == rhs.copy.map(\.name) && lhs.copy.map(\.size) == rhs.copy.map(\.size)
            && lhs.unchanged == rhs.unchanged && lhs.delete == rhs.delete
    }
}

/// A `--delete` refused before anything was copied or deleted (`SyncPlan.refusal`).
package struct SyncRefusal: Error, CustomStringConvertible, Sendable {
    package var reason: String
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

    /// Why deleting `count` entries is refused, or nil, when the destination will then hold
    /// `keeping` entries the filters take (the source's): deleting everything (the source holds
    /// none), or more than `maxDeleteShare` of what the destination would hold with them, needs `force`.
    package static func refusal(deleting count: Int, keeping: Int, options: SyncOptions) -> String? {
        guard count > 0, !options.force else { return nil }
        if keeping == 0 {
            return "--delete would remove all \(count) of the destination's entries (the source holds none of them): "
                + "check the source and the filters, or add --force to delete them"
        }
        let share = Double(count) / Double(count + keeping)
        guard share > options.maxDeleteShare else { return nil }
        return "--delete would remove \(count) of the destination's \(count + keeping) entries (\(Int((share * 100).rounded()))%), "
            + "more than --max-delete \(Int((options.maxDeleteShare * 100).rounded()))%: check the source and the filters, "
            + "or raise --max-delete, or add --force"
    }
}

extension S3Client {
    /// Deletes `keys` from `bucket`, a thousand per DeleteObjects request (with its Content-MD5,
    /// which S3 requires); throws when the server reports any key it did not delete.
    package func deleteObjects(bucket: String, keys: [String]) async throws {
        var start = 0
        while start < keys.count {
            let batch = keys[start..<min(start + 1000, keys.count)]
            start += batch.count
            var xml = "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet>"
            for key in batch { xml += "<Object><Key>\(XMLText.escape(key))</Key></Object>" }
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
        }
    }
}
