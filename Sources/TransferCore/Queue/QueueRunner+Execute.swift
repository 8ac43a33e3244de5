import Foundation

extension QueueRunner {
    /// Runs one job to an outcome. Never throws: every failure becomes an
    /// outcome the loop records.
    func execute(_ job: ActiveJob) async -> JobOutcome {
        let spec = job.record.spec
        guard spec.kind == .download else { return await executeUpload(job) }
        if let prefix = S3Prefix(spec.url) { return await executePrefix(job, prefix) }
        let options: DownloadOptions
        do {
            options = try downloadOptions(for: job)
        } catch {
            return .failed(String(describing: error))
        }
        let transport = transports.transport(named: spec.transport ?? self.options.transport)
        let engine = DownloadEngine(transport: transport, options: options,
                                    store: JobCheckpointStore(store: store, jobID: spec.id, initial: job.record.checkpoint))
        job.engine.withLock { $0 = engine }
        do {
            return .done(try await engine.run())
        } catch let deferred as DownloadDeferred {
            if Task.isCancelled { return job.cancelledByUser.current ? .cancelled : .interrupted }
            return .retry(delay: deferred.delay, reason: deferred.reason, failures: deferred.failures, throttled: deferred.throttled)
        } catch {
            if error is CancellationError || Task.isCancelled {
                return job.cancelledByUser.current ? .cancelled : .interrupted
            }
            return .failed(String(describing: error))
        }
    }

    private func downloadOptions(for job: ActiveJob) throws -> DownloadOptions {
        let spec = job.record.spec
        let headers = try expandedHeaders(spec)
        guard var url = URL(string: spec.url), let destination = spec.destination else {
            throw QueueError.unknownJob(spec.id)
        }
        var signer: (@Sendable (String, URL, HTTPHeaders) -> HTTPHeaders)?
        if let location = S3Location(spec.url) {
            let configuration = try S3Configuration.resolve(endpoint: spec.endpoint, region: spec.region, profile: spec.profile,
                                                            environment: environment)
            let client = S3Client(configuration: configuration, transport: transports.transport(named: spec.transport ?? options.transport))
            (url, signer) = client.downloadSource(bucket: location.bucket, key: location.key)
        }
        try ensureFolder(of: destination)
        var download = DownloadOptions(
            url: url, destination: destination, headers: headers, connections: job.connections,
            sha256: spec.sha256, overwrite: spec.overwrite ?? .refuse,
            retry: RetryPolicy(maxAttempts: spec.retries ?? options.retries, baseDelay: options.retryBaseDelay),
            tls: options.tls, connectTimeout: options.connectTimeout, idleTimeout: options.idleTimeout,
            maxRedirects: options.maxRedirects, maxRate: spec.limitRate)
        download.sharedLimiter = limiter
        download.signer = signer
        download.retryInPlace = false
        download.syncEachFile = false
        download.deferRename = true
        download.ownTicker = false
        // A checkpoint (a row update, no fsync) after every 256 KiB write: a crash
        // re-fetches at most about 512 KiB per active segment.
        download.checkpointBytes = 256 << 10
        download.writeBufferSize = 256 << 10
        download.checkpointInterval = 0.25
        download.priorFailures = job.record.attempts
        return download
    }
}

extension QueueRunner {
    /// Runs a download of a whole S3 prefix into the job's folder: one job,
    /// whose checkpoint (the listing page it is in, what that page has done,
    /// what failed) lives in its row, so a killed run resumes mid-listing.
    func executePrefix(_ job: ActiveJob, _ prefix: S3Prefix) async -> JobOutcome {
        let spec = job.record.spec
        let transport = transports.transport(named: spec.transport ?? options.transport)
        let retry = RetryPolicy(maxAttempts: spec.retries ?? options.retries, baseDelay: options.retryBaseDelay)
        do {
            guard let destination = spec.destination else { throw QueueError.unknownJob(spec.id) }
            let configuration = try S3Configuration.resolve(endpoint: spec.endpoint, region: spec.region,
                                                            profile: spec.profile, environment: environment)
            let client = S3Client(configuration: configuration, transport: transport, retry: retry, tls: options.tls)
            var download = S3PrefixDownloadOptions(bucket: prefix.bucket, prefix: prefix.prefix, destination: destination,
                                                   confinedTo: layout.root)
            download.filter = S3PrefixPlan.Filter(include: spec.include ?? [], exclude: spec.exclude ?? [])
            // A key must never become a job file or touch the queue's state.
            download.forbidden = [layout.directory]
            download.connections = job.connections
            download.overwrite = spec.overwrite ?? .refuse
            download.retry = retry
            download.tls = options.tls
            download.connectTimeout = options.connectTimeout
            download.idleTimeout = options.idleTimeout
            download.maxRate = spec.limitRate
            download.sharedLimiter = limiter
            let result = try await S3PrefixDownload(
                client: client, transport: transport, options: download,
                store: JobUploadStateStore(store: store, jobID: spec.id, initial: job.record.checkpoint)
            ) { event in
                if case .progress(let bytes, _) = event { job.uploadProgress.withLock { $0 = (bytes, nil) } }
            }.run()
            return .completed(size: result.bytes)
        } catch {
            if error is CancellationError || Task.isCancelled {
                return job.cancelledByUser.current ? .cancelled : .interrupted
            }
            // Objects that failed, or a listing that failed after its own retries: the job
            // waits and goes again with its checkpoint (what failed first, then the listing
            // where it stopped), until its retries are spent.
            let failures = job.record.attempts + 1
            let retriable = error is S3PrefixError || error is TransportError
                || { if case S3Error.service(let status, _, _, _, _) = error { return status >= 500 || status == 429 } else { return false } }()
            if retriable && failures < retry.maxAttempts {
                return .retry(delay: retry.backoff(attempt: failures, random: Double.random(in: 0..<1)),
                              reason: String(describing: error), failures: failures, throttled: false)
            }
            return .failed(String(describing: error))
        }
    }

    /// An upload job's speed: its own `limit_rate` and the run's bucket. A
    /// backend that cannot cap what it sends is refused by the transport
    /// (`TransportError.unsupported`, which fails the job with its reason).
    func sendRate(_ spec: JobSpec) -> SendRate {
        SendRate(bytesPerSecond: spec.limitRate, shared: limiter)
    }

    /// Runs a `put`, `form` or `s3-upload` job.
    func executeUpload(_ job: ActiveJob) async -> JobOutcome {
        let spec = job.record.spec
        let transport = transports.transport(named: spec.transport ?? options.transport)
        let retry = RetryPolicy(maxAttempts: spec.retries ?? options.retries, baseDelay: options.retryBaseDelay)
        var s3: (upload: S3MultipartUpload, client: S3Client, state: JobUploadStateStore)?
        do {
            let headers = try expandedHeaders(spec)
            // Sources are read through no symbolic link below the root (`ConfinedPath`).
            for source in [spec.source].compactMap({ $0 }) + (spec.files ?? []).map(\.path) {
                try ConfinedPath.check(source, root: layout.root, create: false, finalMustNotBeLink: true)
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
                                           checksum: spec.sha256 == nil ? nil : .sha256, retry: retry, tls: options.tls,
                                           connectTimeout: options.connectTimeout, idleTimeout: options.idleTimeout)
                upload.expectedSHA256 = spec.sha256
                upload.rate = sendRate(spec)
                let result = try await UploadEngine(transport: transport, options: upload,
                                                    onEvent: progressRecorder(job)).run()
                return .completed(size: result.bytesSent)
            case .s3Upload:
                guard let location = S3Location(spec.url), let source = spec.source else { throw QueueError.unknownJob(spec.id) }
                let configuration = try S3Configuration.resolve(endpoint: spec.endpoint, region: spec.region,
                                                                profile: spec.profile, environment: environment)
                let client = S3Client(configuration: configuration, transport: transport, retry: retry, tls: options.tls)
                let state = JobUploadStateStore(store: store, jobID: spec.id, initial: job.record.checkpoint)
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: source, isDirectory: &isDirectory), isDirectory.boolValue {
                    let result = try await S3DirectoryUpload(client: client, directory: source, bucket: location.bucket,
                                                             prefix: location.key, partSize: spec.partSize ?? 8 << 20,
                                                             partsInFlight: spec.partsInFlight ?? 10, rate: sendRate(spec),
                                                             filter: S3PrefixPlan.Filter(include: spec.include ?? [],
                                                                                         exclude: spec.exclude ?? []),
                                                             skipUnchanged: spec.skipUnchanged ?? false, store: state).run()
                    return .completed(size: result.bytes)
                }
                var uploadOptions = S3UploadOptions(source: source, bucket: location.bucket, key: location.key,
                                                    partSize: spec.partSize ?? 8 << 20, partsInFlight: spec.partsInFlight ?? 10,
                                                    contentType: spec.contentType)
                uploadOptions.rate = sendRate(spec)
                uploadOptions.skipUnchanged = spec.skipUnchanged ?? false
                let upload = S3MultipartUpload(client: client, options: uploadOptions, state: state,
                                               onEvent: progressRecorder(job))
                s3 = (upload, client, state)
                let result = try await upload.run()
                return .completed(size: result.size)
            case .download:
                return .failed("not an upload")
            }
        } catch {
            if error is CancellationError || Task.isCancelled {
                guard job.cancelledByUser.current else { return .interrupted }
                // A cancelled S3 upload is aborted so no parts are left behind.
                if let s3 { await s3.upload.abandon() }
                return .cancelled
            }
            return .failed(String(describing: error))
        }
    }
}

extension QueueRunner {
    /// Keeps an upload's latest byte count where the progress tick reads it.
    /// and passes its retries on as events (it retries inside its slot).
    func progressRecorder(_ job: ActiveJob) -> @Sendable (UploadEvent) -> Void {
        { [post] event in
            switch event {
            // A resumed S3 upload starts from its recorded parts (its first
            // report comes after ListParts); a plain upload starts over.
            case .started(let total):
                let resumable = job.record.spec.kind == .s3Upload
                job.uploadProgress.withLock { $0 = (resumable ? min(job.record.bytesDone, total) : 0, total) }
            case .progress(let sent, let total): job.uploadProgress.withLock { $0 = (sent, total) }
            case .retrying(let attempt, let delay, let reason):
                post.yield(.event(.retrying(JobRetry(id: job.record.id, attempt: attempt, delay: delay, reason: reason))))
            }
        }
    }

    /// The job's headers with `${env:NAME}` references filled in (only now, as it runs).
    func expandedHeaders(_ spec: JobSpec) throws -> HTTPHeaders {
        var headers = HTTPHeaders()
        for (name, value) in spec.headers.sorted(by: { $0.key < $1.key }) {
            let expanded = try EnvironmentReference.expand(value, environment: environment)
            // What came from the environment is a secret wherever it shows up in a log.
            if expanded != value { Redaction.registerSecret(expanded) }
            headers.add(name, expanded)
        }
        return headers
    }
}

/// An S3 upload's resume state kept in the job's row.
struct JobUploadStateStore: UploadStateStore {
    let store: QueueStore
    let jobID: String
    let initial: String?

    func load() throws -> String? { try store.checkpoint(for: jobID) ?? initial }
    func save(_ json: String) throws { try store.saveCheckpoint(json, for: jobID) }
    func remove() throws { try store.saveCheckpoint(nil, for: jobID) }
}
