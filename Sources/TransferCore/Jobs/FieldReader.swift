/// Typed access to a job object's fields, collecting type errors instead of throwing.
struct FieldReader {
    struct Problem {
        let field: String
        let message: String
    }

    let fields: [String: JSONValue]
    private(set) var problems: [Problem] = []

    init(fields: [String: JSONValue]) { self.fields = fields }

    func has(_ key: String) -> Bool { fields[key] != nil }

    mutating func string(_ key: String) -> String? {
        guard let value = fields[key] else { return nil }
        guard case .string(let text) = value else {
            problems.append(Problem(field: key, message: "must be a string, not \(value.typeName)"))
            return nil
        }
        return text
    }

    mutating func integer(_ key: String, in range: ClosedRange<Int64>) -> Int64? {
        guard let value = fields[key] else { return nil }
        guard case .integer(let number) = value else {
            problems.append(Problem(field: key, message: "must be a whole number, not \(value.typeName)"))
            return nil
        }
        guard range.contains(number) else {
            problems.append(Problem(field: key, message: "must be from \(range.lowerBound) to \(range.upperBound), not \(number)"))
            return nil
        }
        return number
    }

    mutating func bool(_ key: String) -> Bool? {
        guard let value = fields[key] else { return nil }
        guard case .bool(let flag) = value else {
            problems.append(Problem(field: key, message: "must be true or false, not \(value.typeName)"))
            return nil
        }
        return flag
    }

    mutating func stringList(_ key: String) -> [String]? {
        guard let value = fields[key] else { return nil }
        guard case .array(let items) = value else {
            problems.append(Problem(field: key, message: "must be a list of strings, not \(value.typeName)"))
            return nil
        }
        var result: [String] = []
        for (index, item) in items.enumerated() {
            guard case .string(let text) = item else {
                problems.append(Problem(field: key, message: "item \(index + 1) must be a string, not \(item.typeName)"))
                continue
            }
            result.append(text)
        }
        return result
    }

    mutating func stringMap(_ key: String) -> [String: String]? {
        guard let value = fields[key] else { return nil }
        guard case .object(let object) = value else {
            problems.append(Problem(field: key, message: "must be an object of strings, not \(value.typeName)"))
            return nil
        }
        var result: [String: String] = [:]
        for (name, item) in object {
            guard case .string(let text) = item else {
                problems.append(Problem(field: key, message: "\"\(name)\" must be a string, not \(item.typeName)"))
                continue
            }
            result[name] = text
        }
        return result
    }

    mutating func formFiles(_ key: String) -> [JobSpec.FormFile]? {
        guard let value = fields[key] else { return nil }
        guard case .array(let items) = value else {
            problems.append(Problem(field: key, message: "must be a list of {\"field\", \"path\"} objects, not \(value.typeName)"))
            return nil
        }
        var files: [JobSpec.FormFile] = []
        for (index, item) in items.enumerated() {
            guard case .object(let object) = item else {
                problems.append(Problem(field: key, message: "item \(index + 1) must be an object"))
                continue
            }
            var reader = FieldReader(fields: object)
            let unknown = Set(object.keys).subtracting(["field", "path", "filename", "content_type"])
            for name in unknown.sorted() {
                problems.append(Problem(field: key, message: "item \(index + 1): unknown key \"\(name)\""))
            }
            guard let field = reader.string("field"), let path = reader.string("path") else {
                problems.append(Problem(field: key, message: "item \(index + 1) needs \"field\" and \"path\" strings"))
                continue
            }
            files.append(JobSpec.FormFile(field: field, path: path, filename: reader.string("filename"),
                                          contentType: reader.string("content_type")))
            problems += reader.problems.map { Problem(field: key, message: "item \(index + 1): \($0.field) \($0.message)") }
        }
        return files
    }
}

/// "Did you mean…?" for misspelt keys: the closest name within two edits.
package enum Spelling {
    package static func closest(to word: String, in candidates: Set<String>) -> String? {
        // The nearest, and of those at one distance the first in order: the same answer every time.
        candidates.map { ($0, distance(word, $0)) }.filter { $0.1 <= 2 }.min { ($0.1, $0.0) < ($1.1, $1.0) }?.0
    }

    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var previous = Array(0...b.count)
        for i in 1...max(1, a.count) where !a.isEmpty {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(1, b.count) where !b.isEmpty {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return a.isEmpty ? b.count : previous[b.count]
    }
}

/// `${env:NAME}` references in job values: how secrets are written.
package enum EnvironmentReference {
    /// What is wrong with the references in `value`, if anything.
    static func problem(in value: String) -> String? {
        var rest = Substring(value)
        while let start = rest.range(of: "${") {
            guard let end = rest[start.upperBound...].firstIndex(of: "}") else { return "an unclosed ${" }
            let inner = rest[start.upperBound..<end]
            guard inner.hasPrefix("env:"), isName(inner.dropFirst(4)) else {
                return "\"${\(inner)}\" is not a reference; write ${env:NAME}"
            }
            rest = rest[rest.index(after: end)...]
        }
        return nil
    }

    static func isName(_ name: Substring) -> Bool {
        guard let first = name.first, first == "_" || (first.isASCII && first.isLetter) else { return false }
        return name.allSatisfy { $0 == "_" || ($0.isASCII && ($0.isLetter || $0.isNumber)) }
    }

    /// Replaces every reference with the variable's value; throws naming a missing variable.
    package static func expand(_ value: String, environment: [String: String]) throws -> String {
        var result = ""
        var rest = Substring(value)
        while let start = rest.range(of: "${env:"), let end = rest[start.upperBound...].firstIndex(of: "}") {
            result += rest[..<start.lowerBound]
            let name = String(rest[start.upperBound..<end])
            guard let variable = environment[name] else { throw MissingVariable(name: name) }
            result += variable
            rest = rest[rest.index(after: end)...]
        }
        return result + rest
    }

    package struct MissingVariable: Error, CustomStringConvertible {
        package let name: String
        package var description: String { "the environment variable \(name) is not set; export it before running" }
    }
}
