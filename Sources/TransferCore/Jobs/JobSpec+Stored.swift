import Foundation

/// The form a spec takes in the store's `spec` column: a JSON object with the
/// property names as keys (the same keys `Codable` uses, so rows written by
/// either read back with both), written and read by hand because the queue
/// does it once per job on ingest and once per claim.
extension JobSpec {
    /// Compact JSON, keys sorted, absent optionals left out.
    public var storedJSON: String {
        var object = JSONObject()
        if let chunkSize { object.add("chunkSize", chunkSize) }
        if let connections { object.add("connections", connections) }
        if let contentType { object.add("contentType", contentType) }
        if let destination { object.add("destination", destination) }
        if let endpoint { object.add("endpoint", endpoint) }
        if let exclude { object.add("exclude", .array(exclude.map { .string($0) })) }
        if let fields { object.add("fields", Self.stringMap(fields)) }
        if let files {
            object.add("files", .array(files.map { file in
                var entry = JSONObject()
                if let contentType = file.contentType { entry.add("contentType", contentType) }
                entry.add("field", file.field)
                if let filename = file.filename { entry.add("filename", filename) }
                entry.add("path", file.path)
                return .object(entry)
            }))
        }
        object.add("headers", Self.stringMap(headers))
        object.add("id", id)
        if let include { object.add("include", .array(include.map { .string($0) })) }
        object.add("kind", kind.rawValue)
        if let limitRate { object.add("limitRate", limitRate) }
        if let speedLimit { object.add("speedLimit", speedLimit) }
        if let speedTime { object.add("speedTime", speedTime) }
        if let method { object.add("method", method) }
        if let notify { object.add("notify", notify) }
        if let onDone { object.add("onDone", .array(onDone.map { .string($0) })) }
        if let onFailed { object.add("onFailed", .array(onFailed.map { .string($0) })) }
        if let overwrite { object.add("overwrite", overwrite.rawValue) }
        if let partSize { object.add("partSize", partSize) }
        if let partsInFlight { object.add("partsInFlight", partsInFlight) }
        object.add("priority", priority)
        if let profile { object.add("profile", profile) }
        if let region { object.add("region", region) }
        if let retries { object.add("retries", retries) }
        if let sha256 { object.add("sha256", sha256) }
        if let checksums { object.add("checksums", checksums) }
        if let checksumsName { object.add("checksumsName", checksumsName) }
        if let mirrors { object.add("mirrors", .array(mirrors.map { .string($0) })) }
        if let connectionsPerMirror { object.add("connectionsPerMirror", connectionsPerMirror) }
        if let size { object.add("size", size) }
        if let pieces { object.add("pieces", pieces) }
        if let skipUnchanged { object.add("skipUnchanged", .bool(skipUnchanged)) }
        if let delete { object.add("delete", .bool(delete)) }
        if let maxDelete { object.add("maxDelete", maxDelete) }
        if let force { object.add("force", .bool(force)) }
        if let source { object.add("source", source) }
        if let sourceEndpoint { object.add("sourceEndpoint", sourceEndpoint) }
        if let sourceProfile { object.add("sourceProfile", sourceProfile) }
        if let sourceRegion { object.add("sourceRegion", sourceRegion) }
        if let transport { object.add("transport", transport) }
        object.add("url", url)
        return object.serialized()
    }

    private static func stringMap(_ map: [String: String]) -> JSONObject.Value {
        var object = JSONObject()
        for key in map.keys.sorted() { object.add(key, map[key]!) }
        return .object(object)
    }

    /// Reads a `spec` column.
    public init(stored text: String) throws {
        guard case .object(let members) = try JSONParser.parse(text) else { throw StoredSpecError("not an object") }
        func string(_ key: String) throws -> String? {
            switch members[key] {
            case nil, .null?: return nil
            case .string(let value)?: return value
            default: throw StoredSpecError("\(key) is not a string")
            }
        }
        func integer(_ key: String) throws -> Int64? {
            switch members[key] {
            case nil, .null?: return nil
            case .integer(let value)?: return value
            default: throw StoredSpecError("\(key) is not an integer")
            }
        }
        func list(_ key: String) throws -> [String]? {
            switch members[key] {
            case nil, .null?: return nil
            case .array(let items)?:
                return try items.map { item in
                    guard case .string(let text) = item else { throw StoredSpecError("\(key) holds a non-string") }
                    return text
                }
            default: throw StoredSpecError("\(key) is not a list")
            }
        }
        func map(_ key: String) throws -> [String: String]? {
            switch members[key] {
            case nil, .null?: return nil
            case .object(let object)?:
                return try object.mapValues { value in
                    guard case .string(let text) = value else { throw StoredSpecError("\(key) holds a non-string") }
                    return text
                }
            default: throw StoredSpecError("\(key) is not an object")
            }
        }
        guard let id = try string("id"), let url = try string("url"),
              let kind = try string("kind").flatMap(Kind.init(rawValue:)) else {
            throw StoredSpecError("id, kind or url missing")
        }
        self.init(id: id, kind: kind, url: url, destination: try string("destination"), source: try string("source"),
                  headers: try map("headers") ?? [:], priority: Int(try integer("priority") ?? 0))
        transport = try string("transport")
        connections = try integer("connections").map(Int.init)
        sha256 = try string("sha256")
        checksums = try string("checksums")
        checksumsName = try string("checksumsName")
        mirrors = try list("mirrors")
        connectionsPerMirror = try integer("connectionsPerMirror").map(Int.init)
        size = try integer("size")
        pieces = try string("pieces")
        if let policy = try string("overwrite") {
            guard let value = OverwritePolicy(rawValue: policy) else { throw StoredSpecError("unknown overwrite \(policy)") }
            overwrite = value
        }
        retries = try integer("retries").map(Int.init)
        limitRate = try integer("limitRate")
        speedLimit = try integer("speedLimit")
        speedTime = try integer("speedTime")
        include = try list("include")
        if case .bool(let flag)? = members["skipUnchanged"] { skipUnchanged = flag }
        if case .bool(let flag)? = members["delete"] { delete = flag }
        maxDelete = try integer("maxDelete").map(Int.init)
        if case .bool(let flag)? = members["force"] { force = flag }
        exclude = try list("exclude")
        onDone = try list("onDone")
        onFailed = try list("onFailed")
        notify = try string("notify")
        method = try string("method")
        contentType = try string("contentType")
        self.fields = try map("fields")
        if case .array(let items)? = members["files"] {
            files = try items.map { item in
                guard case .object(let file) = item, case .string(let field)? = file["field"], case .string(let path)? = file["path"] else {
                    throw StoredSpecError("a form file lacks field or path")
                }
                var filename: String?
                var contentType: String?
                if case .string(let value)? = file["filename"] { filename = value }
                if case .string(let value)? = file["contentType"] { contentType = value }
                return FormFile(field: field, path: path, filename: filename, contentType: contentType)
            }
        }
        sourceEndpoint = try string("sourceEndpoint")
        sourceProfile = try string("sourceProfile")
        sourceRegion = try string("sourceRegion")
        partSize = try integer("partSize")
        chunkSize = try integer("chunkSize")
        partsInFlight = try integer("partsInFlight").map(Int.init)
        region = try string("region")
        endpoint = try string("endpoint")
        profile = try string("profile")
    }
}

/// A `spec` column that does not describe a job (a damaged or foreign store).
public struct StoredSpecError: Error, CustomStringConvertible {
    public let description: String
    init(_ problem: String) { description = "a stored job spec is unreadable: \(problem)" }
}
