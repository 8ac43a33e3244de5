import Foundation

/// Runs a download of a whole S3 prefix into the job's folder: one job, whose
/// checkpoint (the listing page it is in, what that page has done, what failed)
/// lives in its row, so a killed run resumes mid-listing.
struct S3PrefixExecutor: JobExecutor {
    let context: ExecutionContext
    let prefix: S3Prefix

    func execute(_ job: QueueRunner.ActiveJob) async -> QueueRunner.JobOutcome {
        let spec = job.record.spec
        let transport = context.transports.transport(named: spec.transport ?? context.options.transport)
        let retry = RetryPolicy(maxAttempts: spec.retries ?? context.options.retries, baseDelay: context.options.retryBaseDelay)
        do {
            guard let destination = spec.destination else { throw QueueError.unknownJob(spec.id) }
            let configuration = try S3Configuration.resolve(endpoint: spec.endpoint, region: spec.region,
                                                            profile: spec.profile, environment: context.environment)
            let client = S3Client(configuration: configuration, transport: transport, retry: retry, tls: context.options.tls)
            var download = S3PrefixDownloadOptions(bucket: prefix.bucket, prefix: prefix.prefix, destination: destination,
                                                   confinedTo: context.layout.root)
            download.filter = S3PrefixPlan.Filter(include: spec.include ?? [], exclude: spec.exclude ?? [])
            // A key must never become a job file or touch the queue's state.
            download.forbidden = [context.layout.directory]
            download.connections = job.connections
            download.overwrite = spec.overwrite ?? .refuse
            download.retry = retry
            download.tls = context.options.tls
            download.connectTimeout = context.options.connectTimeout
            download.idleTimeout = context.options.idleTimeout
            download.lowSpeed = context.lowSpeed(spec)
            download.maxRate = spec.limitRate
            download.sharedLimiter = context.bandwidth.down
            // "delete": planned from one listing and one walk of the folder before any byte moves (a
            // refusal past max_delete fails the job with nothing changed), done once every key is saved.
            let sync = spec.syncOptions
            var plan: FolderSync?
            if sync.delete {
                let made = try await FolderSync.plan(client: client, options: download, sync: sync)
                if let refusal = made.preview.refusal { return .failed("\(refusal); nothing was downloaded or deleted") }
                plan = made
            }
            let saved = SavedFiles()
            let result = try await S3PrefixDownload(
                client: client, transport: transport, options: download,
                store: JobUploadStateStore(store: context.store, job: job)
            ) { event in
                saved.note(event)
                if case .progress(let bytes, _) = event { job.uploadProgress.withLock { $0 = (bytes, nil) } }
            }.run()
            // Keys left out are a partial copy, never a done job: the job fails, naming them (and deletes nothing).
            if let partial = result.partialCopy { return .failed(partial) }
            if let plan, !plan.preview.delete.isEmpty { _ = try plan.deleteExtraneous(in: destination, saved: saved.current) }
            return .completed(size: result.bytes)
        } catch {
            if error is CancellationError || Task.isCancelled {
                return job.cancelledByUser.current ? .cancelled : .interrupted
            }
            // Objects that failed, or a listing that failed after its own retries: the job
            // waits and goes again with its checkpoint (what failed first, then the listing
            // where it stopped), until its retries are spent.
            let failures = job.record.attempts + 1
            let failure: RetryPolicy.Failure
            switch error {
            case let error as TransportError: failure = .transport(error.kind)
            case S3Error.service(let status, let code, _, _, _): failure = .s3(status: status, code: code, retryAfter: nil)
            // Objects that failed were each retried by their own downloads first.
            case is S3PrefixError: failure = .transport(.other)
            default: failure = .local
            }
            if case .retry(let delay) = retry.decide(failure, attempt: failures) {
                var throttled = false
                if case .s3(let status, _, _) = failure { throttled = status == 429 || status == 503 }
                return .retry(delay: delay, reason: String(describing: error), failures: failures, throttled: throttled)
            }
            return .failed(String(describing: error))
        }
    }
}
