import Foundation

/// Job ids as people meet them: derived from the job file, shown by their shortest unique
/// prefix, and taken back from any unique prefix (as git takes a commit's).
package enum JobIDs {
    /// Hex digits of the digest a derived id carries: 64 bits, so a million jobs of one stem
    /// collide with odds of about 3 in 100 million.
    static let digestLength = 16
    /// The fewest digest digits a shortened id keeps (git keeps at least 4 of a commit's).
    package static let minimumDigits = 4

    /// The id of job `number` of a job file that has no `id` of its own: the file's stem, then
    /// digits of a digest of the file's content and the job's number. Reading the same file
    /// again gives the same ids; the jobs of one file differ from their first digest digit
    /// on, so a few digits after the stem name one.
    package static func derived(stem: String, contentHash: String, number: Int) -> String {
        "\(stem)-\(SHA256Hasher.hex(of: "\(contentHash)/\(number)").prefix(digestLength))"
    }

    /// The fewest characters an id may be shortened to: through `minimumDigits` characters
    /// after its last `-` (the digest of a derived id), so that ids a person chose, like
    /// `alpha-2`, are shown whole.
    static func minimumLength(of id: String) -> Int {
        guard let dash = id.lastIndex(of: "-") else { return id.count }
        return min(id.count, id.distance(from: id.startIndex, to: dash) + 1 + minimumDigits)
    }

    /// The shortest prefix of `id`, no shorter than `minimumLength(of:)`, that no other id
    /// starts with; the whole id when every shorter one is shared. `isUnique(prefix)` says
    /// whether `id` is the only id starting with `prefix`; being false for a prefix, it is
    /// false for every shorter one, so the length is found by bisection (a few store
    /// lookups an id, whatever the queue's size).
    package static func shortest(_ id: String, isUnique: (String) throws -> Bool) rethrows -> String {
        var low = minimumLength(of: id)
        var high = id.count
        guard low < high else { return id }
        // Invariant: the prefix of length `high` is the answer if none in [low, high) is unique.
        while low < high {
            let middle = (low + high) / 2
            if try isUnique(String(id.prefix(middle))) { high = middle } else { low = middle + 1 }
        }
        return String(id.prefix(high))
    }

    /// `shortest` for each of `ids`, when they are every id there is (a queue listed whole).
    package static func shortest(among ids: [String]) -> [String: String] {
        let sorted = ids.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        var shown: [String: String] = [:]
        for (index, id) in sorted.enumerated() {
            let neighbours = [index > 0 ? sorted[index - 1] : nil, index + 1 < sorted.count ? sorted[index + 1] : nil]
                .compactMap { $0 }
            shown[id] = shortest(id) { prefix in !neighbours.contains { $0.utf8.starts(with: prefix.utf8) } }
        }
        return shown
    }

    /// The job `typed` names: its whole id, or the one job whose id starts with it.
    package static func resolve(_ typed: String, in store: QueueStore) throws -> String {
        if try store.job(typed) != nil { return typed }
        return try choose(typed, among: store.jobIDs(startingWith: typed, limit: 6))
    }

    /// The decision, apart from the store: one match is the job, when the text typed may name it
    /// (`mayName`); none or several is an error.
    package static func choose(_ typed: String, among matches: [String]) throws -> String {
        switch matches.count {
        case 1:
            guard mayName(typed, matches[0]) else { throw QueueError.partialJob(typed, match: matches[0]) }
            return matches[0]
        case 0: throw QueueError.unknownJob(typed)
        default: throw QueueError.ambiguousJob(typed, matches: matches)
        }
    }

    /// Whether `typed`, a prefix of `id` and not all of it, may name it: at least 3 characters,
    /// and not stopping inside a number unless it reaches `minimumLength(of:)`. Otherwise
    /// `retry job-2`, after job-2 was purged, would retry job-20, and an empty name from a
    /// script would name a queue's only job.
    static func mayName(_ typed: String, _ id: String) -> Bool {
        guard typed.count >= 3 else { return false }
        if typed.count >= minimumLength(of: id) { return true }
        let next = id.dropFirst(typed.count).first
        return !(typed.last?.isNumber == true && next?.isNumber == true)
    }

    /// The shortened form of each of `jobs`' ids, asking the store about ids beyond them.
    package static func shortest(of ids: [String], in store: QueueStore) throws -> [String: String] {
        var shown: [String: String] = [:]
        for id in ids where shown[id] == nil {
            shown[id] = try shortest(id) { prefix in try store.jobIDs(startingWith: prefix, limit: 2) == [id] }
        }
        return shown
    }
}
