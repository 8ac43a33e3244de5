import Foundation

/// Runs a `put`, `form`, `s3-upload`, `tus` or `resumable` job (a file, or a folder to a prefix); an S3
/// upload's id and recorded parts, and a tus or resumable upload's URL and confirmed offset, live in the
/// job's row, so a later attempt, run or worker continues the same upload.
struct UploadExecutor: JobExecutor {
    let context: ExecutionContext

    func execute(_ job: QueueRunner.ActiveJob) async -> QueueRunner.JobOutcome {
        let spec = job.record.spec
        let transport = context.transports.transport(named: spec.transport ?? context.options.transport)
        let retry = RetryPolicy(maxAttempts: spec.retries ?? context.options.retries, baseDelay: context.options.retryBaseDelay)
        var s3: (upload: S3MultipartUpload, client: S3Client, state: JobUploadStateStore)?
        var tus: TusUpload?
        var resumable: ResumableUpload?
        do {
            let headers = try context.expandedHeaders(spec)
            // Sources are read through no symbolic link below the root (`ConfinedPath`).
            for source in [spec.source].compactMap({ $0 }) + (spec.files ?? []).map(\.path) {
                try ConfinedPath.check(source, root: context.layout.root, create: false, finalMustNotBeLink: true)
            }
            switch spec.kind {
            case .put, .form:
                guard let url = URL(string: spec.url) else { throw QueueError.unknownJob(spec.id) }
                let body: UploadBody
                if spec.kind == .put {
                    body = .file(path: spec.source ?? "")
                } else {
                    let files = (spec.files ?? []).map {
                        MultipartForm.File(field: $0.field, path: $0.path, filename: $0.filename, contentType: $0.contentType)
                    }
                    body = .form(MultipartForm(fields: (spec.fields ?? [:]).sorted { $0.key < $1.key }.map { ($0.key, $0.value) },
                                               files: files))
                }
                var upload = UploadOptions(url: url, method: spec.kind == .form ? "POST" : (spec.method ?? "PUT"), body: body,
                                           headers: headers, contentType: spec.contentType,
                                           checksum: spec.sha256 == nil ? nil : .sha256, retry: retry, tls: context.options.tls,
                                           connectTimeout: context.options.connectTimeout, idleTimeout: context.options.idleTimeout)
                upload.expectedSHA256 = spec.sha256
                upload.rate = context.sendRate(spec, transport: transport)
                let result = try await UploadEngine(transport: transport, options: upload,
                                                    onEvent: context.progressRecorder(job)).run()
                return .completed(size: result.bytesSent)
            case .s3Upload:
                guard let location = S3Location(spec.url), let source = spec.source else { throw QueueError.unknownJob(spec.id) }
                let configuration = try S3Configuration.resolve(endpoint: spec.endpoint, region: spec.region,
                                                                profile: spec.profile, environment: context.environment)
                let client = S3Client(configuration: configuration, transport: transport, retry: retry, tls: context.options.tls)
                let state = JobUploadStateStore(store: context.store, job: job)
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: source, isDirectory: &isDirectory), isDirectory.boolValue {
                    let result = try await S3DirectoryUpload(client: client, directory: source, bucket: location.bucket,
                                                             prefix: location.key, partSize: spec.partSize ?? 8 << 20,
                                                             partsInFlight: spec.partsInFlight ?? 10, rate: context.sendRate(spec, transport: transport),
                                                             filter: S3PrefixPlan.Filter(include: spec.include ?? [],
                                                                                         exclude: spec.exclude ?? []),
                                                             skipUnchanged: spec.skipUnchanged ?? false, sync: spec.syncOptions,
                                                             store: state).run()
                    if let partial = result.partialCopy { return .failed(partial) }
                    return .completed(size: result.bytes)
                }
                if spec.delete != nil {
                    return .failed("\"delete\" is for a folder upload; \(source) is one file — remove it from the job")
                }
                var uploadOptions = S3UploadOptions(source: source, bucket: location.bucket, key: location.key,
                                                    partSize: spec.partSize ?? 8 << 20, partsInFlight: spec.partsInFlight ?? 10,
                                                    contentType: spec.contentType)
                uploadOptions.rate = context.sendRate(spec, transport: transport)
                uploadOptions.skipUnchanged = spec.skipUnchanged ?? false
                let upload = S3MultipartUpload(client: client, options: uploadOptions, state: state,
                                               onEvent: context.progressRecorder(job))
                s3 = (upload, client, state)
                let result = try await upload.run()
                return .completed(size: result.size)
            case .tus:
                guard let url = URL(string: spec.url), let source = spec.source else { throw QueueError.unknownJob(spec.id) }
                var options = TusOptions(endpoint: url, source: source, chunkSize: spec.chunkSize ?? TusOptions.defaultChunkSize,
                                         headers: headers, contentType: spec.contentType, retry: retry, tls: context.options.tls,
                                         connectTimeout: context.options.connectTimeout, idleTimeout: context.options.idleTimeout)
                options.rate = context.sendRate(spec, transport: transport)
                let upload = TusUpload(transport: transport, options: options,
                                       state: JobUploadStateStore(store: context.store, job: job),
                                       onEvent: context.progressRecorder(job))
                tus = upload
                let result = try await upload.run()
                return .completed(size: result.size)
            case .resumable:
                guard let url = URL(string: spec.url), let source = spec.source else { throw QueueError.unknownJob(spec.id) }
                var options = ResumableOptions(endpoint: url, source: source, headers: headers, contentType: spec.contentType,
                                               retry: retry, tls: context.options.tls, connectTimeout: context.options.connectTimeout,
                                               idleTimeout: context.options.idleTimeout)
                options.rate = context.sendRate(spec, transport: transport)
                let upload = ResumableUpload(transport: transport, options: options,
                                             state: JobUploadStateStore(store: context.store, job: job),
                                             onEvent: context.progressRecorder(job))
                resumable = upload
                let result = try await upload.run()
                return .completed(size: result.size)
            case .download, .s3Copy:
                return .failed("not an upload")
            }
        } catch {
            if error is CancellationError || Task.isCancelled {
                guard job.cancelledByUser.current else { return .interrupted }
                // A cancelled S3 upload is aborted so no parts are left behind; from a task of its own,
                // since a transport refuses to start an exchange in a cancelled task.
                if let s3 { await Task.detached { await s3.upload.abandon() }.value }
                // A cancelled tus upload is terminated (DELETE) where the server allows it; from a task
                // of its own, since a transport refuses to start an exchange in a cancelled task.
                if let tus { await Task.detached { await tus.abandon() }.value }
                // A cancelled resumable upload is cancelled on the server too (DELETE on the upload resource).
                if let resumable { await Task.detached { await resumable.abandon() }.value }
                return .cancelled
            }
            return .failed(String(describing: error))
        }
    }
}
