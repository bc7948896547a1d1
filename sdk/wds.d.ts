// Types of the Workspace Data Service JavaScript client (sdk/wds.js).
// Hand-written; checked by `tsc --noEmit --strict` on sdk/test/types/usage.ts.

export declare const VERSION: string;

/** Every failure: a server answer `{error, code}` or a local one (status 0 = no HTTP answer). */
export interface WdsError {
  message: string;
  /** Stable code: the server's (`VALIDATION_ERROR`, `NOT_FOUND`, ...) or a local one
   * (`NETWORK_ERROR`, `TIMEOUT`, `BAD_RESPONSE`, `PARTIAL_FAILURE`, `FILTER_REQUIRED`,
   * `SINGLE_ROW_EXPECTED`, `NO_SESSION`, `WORKSPACE_REQUIRED`, `WEBSOCKET_UNAVAILABLE`, ...). */
  code: string;
  /** HTTP status, or 0 when no HTTP answer was received. */
  status: number;
  /** Per-row or per-record failures of batch inserts and writes by filter. */
  errors?: Array<{ index?: number; id?: number; message: string; code: string; status?: number }>;
  /** Plan-limit errors: an upgrade would lift the limit. */
  upgrade?: boolean;
  [extra: string]: unknown;
}

/** What every call resolves to; it never rejects. */
export interface WdsResponse<T> {
  data: T | null;
  error: WdsError | null;
  count: number | null;
  status: number;
  /** A list's cursor for the page after this one (pass it to `.after()`); null on the last page. */
  next?: string | null;
}

/** A flattened row: system columns next to the fields. */
export type Row<F extends object = Record<string, any>> = {
  id: number;
  created_at: string;
  updated_at: string;
} & F;

/** The raw record shape (`{flatten: false}`). */
export interface RawRecord<F extends object = Record<string, any>> {
  id: number;
  fields: F;
  created_at: string;
  updated_at: string;
  pipeline?: PipelineOutcome;
}

export interface PipelineOutcome {
  status: string;
  run_id?: string | null;
  errors?: Record<string, unknown>;
  [key: string]: unknown;
}

export interface StorageLike {
  getItem(key: string): string | null | Promise<string | null>;
  setItem(key: string, value: string): void | Promise<void>;
  removeItem(key: string): void | Promise<void>;
}

export interface Session {
  access_token: string;
  refresh_token: string;
  token_type?: string;
  expires_in: number;
  /** Unix seconds, computed from `expires_in` when the session is stored. */
  expires_at?: number;
  workspace_id?: number;
  user?: AppUser;
}

export interface AppUser {
  id: number;
  email: string;
  name?: string | null;
  fields: Record<string, unknown>;
  created_at: string;
}

export interface ClientOptions {
  /** A rest_api (or builder) token. Server-side only: never put tokens in browser bundles. */
  token?: string;
  /** An app-user session to start from (e.g. handed over by a relay). */
  appUserSession?: Session;
  /** The workspace of app users (auth.signUp / signInWithPassword / refresh). */
  workspaceId?: number;
  fetch?: typeof fetch;
  /** Session persistence; default localStorage in browsers, memory elsewhere. */
  storage?: StorageLike;
  storageKey?: string;
  /** false: keep the app-user session in memory only. */
  persistSession?: boolean;
  /** false: do not refresh the access token before it expires. */
  autoRefreshToken?: boolean;
  /** A WebSocket constructor where the runtime has none (Node 20 without --experimental-websocket). */
  WebSocket?: unknown;
  headers?: Record<string, string>;
  /** Per-request timeout in milliseconds (default: none). */
  timeout?: number;
  /** Default true: rows as `{id, created_at, updated_at, ...fields}`. */
  flatten?: boolean;
}

export interface WriteOptions {
  /** false: skip computed columns (`run_pipeline=false`). */
  runPipeline?: boolean;
  flatten?: boolean;
}

export interface TargetOptions extends WriteOptions {
  /** Write this record id directly (same as `.eq("id", id)`). */
  id?: number | string;
}

type Column<F> = Extract<keyof F, string> | "id" | "created_at" | "updated_at" | (string & {});
type Scalar = string | number | boolean | Date | null;
type FilterOp = "eq" | "neq" | "gt" | "gte" | "lt" | "lte" | "like" | "ilike" | "in" | "contains" | "cs" | "is";

/** A query or write on one table; `await` it (it is a thenable) to run it. */
export interface QueryBuilder<F extends object, R> extends PromiseLike<WdsResponse<R>> {
  /** `"a,b,Rel(X,Y)"` (REST grammar) or a list of names and embeddings (`["Title", "Owner(Name)"]`);
   * `count` fills `count`: `"exact"`, `"planned"` (the planner's estimate) or `"estimated"`
   * (exact below 100,000 estimated rows). */
  select(columns?: string | Array<Column<F> | `${string}(${string})`>, options?: { count?: "exact" | "planned" | "estimated"; flatten?: boolean }): QueryBuilder<F, R>;
  /** `eq(col, null)` is `is.null`. */
  eq(column: Column<F>, value: Scalar): QueryBuilder<F, R>;
  /** `neq(col, null)` is `not.is.null`. */
  neq(column: Column<F>, value: Scalar): QueryBuilder<F, R>;
  /** Any of the conditions, REST grammar without the outer parentheses:
   * `or("Score.gte.10,and(Status.eq.done,Title.ilike.*x*)")`; `negate` sends `not.or`. */
  or(conditions: string, options?: { negate?: boolean }): QueryBuilder<F, R>;
  /** All of the conditions, as `or()` writes them: `and("Score.gt.0,Score.lt.10")`;
   * `negate` sends `not.and` (not all of them). */
  and(conditions: string, options?: { negate?: boolean }): QueryBuilder<F, R>;
  gt(column: Column<F>, value: Scalar): QueryBuilder<F, R>;
  gte(column: Column<F>, value: Scalar): QueryBuilder<F, R>;
  lt(column: Column<F>, value: Scalar): QueryBuilder<F, R>;
  lte(column: Column<F>, value: Scalar): QueryBuilder<F, R>;
  /** `*` or `%` is the wildcard. */
  like(column: Column<F>, pattern: string): QueryBuilder<F, R>;
  ilike(column: Column<F>, pattern: string): QueryBuilder<F, R>;
  in(column: Column<F>, values: Iterable<Scalar>): QueryBuilder<F, R>;
  /** multi_select holds all of `values` (`cs.{...}`). */
  contains(column: Column<F>, values: Iterable<Scalar>): QueryBuilder<F, R>;
  is(column: Column<F>, value: null | boolean): QueryBuilder<F, R>;
  not(column: Column<F>, op: FilterOp, value: Scalar | Iterable<Scalar>): QueryBuilder<F, R>;
  /** Raw `<op>.<value>`, e.g. `filter("Score", "not.gte", 3)`; `null` with `eq`/`neq` is
   *  `is.null`/`not.is.null`, an array with `in`/`cs` the list (as the JSON doors read them). */
  filter(column: Column<F>, op: string, value: Scalar | Iterable<Scalar>): QueryBuilder<F, R>;
  match(values: Partial<Record<Column<F>, Scalar>>): QueryBuilder<F, R>;
  order(column: Column<F>, options?: { ascending?: boolean; nullsFirst?: boolean }): QueryBuilder<F, R>;
  limit(count: number): QueryBuilder<F, R>;
  /** Rows `from`..`to`, inclusive. */
  range(from: number, to: number): QueryBuilder<F, R>;
  /** The page after a previous page's `next` cursor (same filters and order). */
  after(cursor: string): QueryBuilder<F, R>;
  /** Every matching row, page by page, following each page's `next` cursor; a failed page throws. */
  pages(pageSize?: number): AsyncGenerator<R, void, unknown>;
  expand(...columns: Array<Column<F> | Array<Column<F>>>): QueryBuilder<F, R>;
  view(viewId: number | string): QueryBuilder<F, R>;
  single(): QueryBuilder<F, R extends Array<infer U> ? U : R>;
  maybeSingle(): QueryBuilder<F, R extends Array<infer U> ? U | null : R>;
  insert(values: Partial<F>, options?: WriteOptions): QueryBuilder<F, Row<F>>;
  /** Many rows: sent in batches of 500; `data[i]` is null where row `i` failed. */
  insert(values: Array<Partial<F>>, options?: WriteOptions): QueryBuilder<F, Array<Row<F> | null>>;
  /** By id (`.eq("id", n)` or `{id}`) or by filter (ids resolved, 8 requests in parallel). */
  update(values: Partial<F>, options?: TargetOptions): QueryBuilder<F, Row<F>[]>;
  delete(options?: { id?: number | string }): QueryBuilder<F, Array<{ id: number; deleted: true }>>;
  catch<T = never>(onRejected?: ((reason: unknown) => T | PromiseLike<T>) | null): Promise<WdsResponse<R> | T>;
}

export interface ChangePayload<F extends object = Record<string, any>> {
  event: "INSERT" | "UPDATE" | "DELETE";
  table_id: number;
  table: string;
  record: Row<F> | null;
  old_record: Row<F> | null;
  seq: number;
  /** The event was too large to send whole (over 256 KiB of JSON by default): `record` and
   * `old_record` hold only `id`, `created_at` and `updated_at`; read the record by id. */
  truncated?: true;
}

export type ChannelStatus = "SUBSCRIBED" | "RECONNECTING" | "CHANNEL_ERROR" | "CLOSED";

export interface ChannelOptions {
  /** `{column: "op.value"}` in the REST grammar. */
  filter?: Record<string, string>;
  /** Replay retained events after this seq first. */
  since?: number;
  flatten?: boolean;
  /** Reconnect when nothing arrives for this long (default 45 000; the server beats every ~15 s). */
  heartbeatTimeoutMs?: number;
  /** Give up on a socket that has not opened after this long and retry (default 10 000). */
  connectTimeoutMs?: number;
}

export interface Channel<F extends object = Record<string, any>> {
  readonly table: string | number;
  readonly tableId: number | null;
  /** The last seq seen; a reconnect resumes after it. */
  readonly lastSeq: number | null;
  readonly status: ChannelStatus;
  on(event: "INSERT" | "UPDATE" | "DELETE" | "*", cb: (change: ChangePayload<F>) => void): Channel<F>;
  on(event: "error", cb: (error: WdsError) => void): Channel<F>;
  on(event: "status", cb: (s: { status: ChannelStatus; error: WdsError | null }) => void): Channel<F>;
  subscribe(cb?: (status: ChannelStatus, error: WdsError | null) => void): Channel<F>;
  unsubscribe(): Promise<WdsResponse<null>>;
}

export interface StoredObject {
  bucket_id: number;
  bucket: string;
  path: string;
  size: number;
  content_type: string;
  created_at: string | null;
}

export interface BucketInfo {
  id: number;
  name: string;
  public: boolean;
}

export type UploadBody = string | Blob | ArrayBuffer | ArrayBufferView | ReadableStream<Uint8Array>;

export interface BucketApi {
  upload(path: string, body: UploadBody, options?: { contentType?: string; upsert?: boolean }): Promise<WdsResponse<StoredObject>>;
  download(path: string): Promise<WdsResponse<Blob>>;
  getPublicUrl(path: string): Promise<WdsResponse<{ publicUrl: string }>>;
  createSignedUrl(path: string, expiresIn?: number): Promise<WdsResponse<{ signedUrl: string; expiresAt: number }>>;
  list(prefix?: string, options?: { limit?: number; offset?: number }): Promise<WdsResponse<StoredObject[]>>;
  remove(paths: string | string[]): Promise<WdsResponse<Array<{ path: string; deleted: true }>>>;
}

export interface StorageApi {
  from(bucket: string | number): BucketApi;
  listBuckets(): Promise<WdsResponse<BucketInfo[]>>;
  getBucket(name: string): Promise<WdsResponse<BucketInfo>>;
  createBucket(name: string, options?: { public?: boolean }): Promise<WdsResponse<BucketInfo>>;
  deleteBucket(name: string, options?: { force?: boolean }): Promise<WdsResponse<unknown>>;
}

export type AuthEvent = "SIGNED_IN" | "SIGNED_OUT" | "TOKEN_REFRESHED";

export interface AuthApi {
  /** `fields`: only Users columns the workspace lists in `signup_fields` (none by default;
   * others → 400 SIGNUP_FIELD_NOT_ALLOWED). 429 SIGNUP_RATE_LIMIT past the sign-up windows. */
  signUp(credentials: { email: string; password: string; fields?: Record<string, unknown> }): Promise<WdsResponse<{ user: AppUser | null; session: Session | null }>>;
  signInWithPassword(credentials: { email: string; password: string }): Promise<WdsResponse<{ user: AppUser | null; session: Session | null }>>;
  signOut(): Promise<WdsResponse<null>>;
  getUser(): Promise<WdsResponse<{ user: AppUser | null }>>;
  getSession(): Promise<WdsResponse<{ session: Session | null }>>;
  setSession(session: Session): Promise<WdsResponse<{ session: Session | null }>>;
  onAuthStateChange(cb: (event: AuthEvent, session: Session | null) => void): { data: { subscription: { unsubscribe(): void } } };
}

export interface TableSummary {
  id: number;
  name: string;
  icon: string;
  created_at: string;
  updated_at: string;
}

export interface RunStatus {
  run_id: string;
  status: string;
  total: number;
  done: number;
  failed: number;
  workflow_id: string;
}

export interface WdsClient {
  readonly auth: AuthApi;
  readonly storage: StorageApi;
  from<F extends object = Record<string, any>>(table: string | number): QueryBuilder<F, Row<F>[]>;
  channel<F extends object = Record<string, any>>(table: string | number, options?: ChannelOptions): Channel<F>;
  tables(): Promise<WdsResponse<TableSummary[]>>;
  clearTableCache(): void;
  run(table: string | number, recordId: number | string, options?: { mode?: "edit" | "create"; changedColumns?: string[]; flatten?: boolean }): Promise<WdsResponse<{ record: Row; pipeline: PipelineOutcome }>>;
  compute(table: string | number, recordId: number | string, column: string): Promise<WdsResponse<{ record_id: number; column: string; value: unknown; pipeline?: PipelineOutcome }>>;
  runActions(table: string | number, options: { recordIds?: number[]; filters?: Record<string, string> | Array<{ column: string; op: string; value: unknown }>; columnIds?: number[] }): Promise<WdsResponse<RunStatus>>;
  getRun(runId: string): Promise<WdsResponse<RunStatus>>;
  sql<T = Record<string, unknown>>(query: string, options?: { count?: boolean }): Promise<WdsResponse<{ rows?: T[]; total?: number | null; table?: string; limit?: number; offset?: number; has_more?: boolean; count?: number }>>;
  schema(): Promise<WdsResponse<Record<string, unknown>>>;
  search<F extends object = Record<string, any>>(table: string | number, query: string, options?: { limit?: number; filters?: Record<string, string>; flatten?: boolean }): Promise<WdsResponse<Array<{ record: Row<F>; score: number }>>>;
}

export declare function createClient(baseUrl: string, options?: ClientOptions): WdsClient;
export declare function flattenRecord<F extends object = Record<string, any>>(record: RawRecord<F>): Row<F>;
export default createClient;
