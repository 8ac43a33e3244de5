/// One thing wrong with a job file: where, what, and how to fix it.
public struct JobFileError: Error, Equatable, Sendable, CustomStringConvertible {
    public var file: String
    /// 1-based position of the job in the file (or line in a `.urls` list).
    public var job: Int?
    public var id: String?
    public var field: String?
    /// Where in a JSON file the mistake is (1-based; the column in bytes), when known.
    public var line: Int?
    public var column: Int?
    public var message: String
    public var fix: String?

    public init(file: String, job: Int? = nil, id: String? = nil, field: String? = nil, line: Int? = nil, column: Int? = nil,
                message: String, fix: String? = nil) {
        self.file = file
        self.job = job
        self.id = id
        self.field = field
        self.line = line
        self.column = column
        self.message = message
        self.fix = fix
    }

    public var description: String {
        var text = file
        if let job { text += ": job \(job)" }
        if let id { text += " (id \"\(id)\")" }
        if let field { text += ": field \"\(field)\"" }
        if let line, let column { text += " at line \(line), column \(column)" }
        text += ": \(message)"
        if let fix { text += " — \(fix)" }
        return text
    }
}

/// All problems found in one file.
public struct JobFileRejection: Error, Equatable, Sendable, CustomStringConvertible {
    public var errors: [JobFileError]
    public var description: String { errors.map(\.description).joined(separator: "\n") }
}
