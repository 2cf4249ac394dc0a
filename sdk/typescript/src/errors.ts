/**
 * The SDK's base exceptions. Every class below `ApiError` is generated from the server's
 * error table and the Python SDK's tree (`errors.generated.ts`), so both SDKs raise the
 * same class for the same `error_code`.
 */

/** Base of everything the SDK throws. */
export class SignoffError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** An argument the SDK refuses before sending anything; `field` names it. */
export class InvalidArgument extends SignoffError {
  readonly field: string;
  constructor(message: string, field: string) {
    super(message);
    this.field = field;
  }
}

/** No answer from the server, after the configured retries. */
export class ConnectionFailed extends SignoffError {}

/** `waitForDecision` ran out of time; `task` is the last state seen. */
export class DecisionTimeout extends SignoffError {
  readonly task: unknown;
  constructor(message: string, task?: unknown) {
    super(message);
    this.task = task;
  }
}

/** A delivery's signature, timestamp or body did not verify: answer 400. */
export class WebhookVerificationFailed extends SignoffError {}

/** A receipt that is malformed, signed by no key given, badly signed, signed by a key
 * retired before the record, or that states something other than what was expected:
 * do not act on it. */
export class ReceiptInvalid extends SignoffError {}

/** One offending field of a refused request. */
export interface FieldError {
  field: string;
  message: string;
}

/** An RFC 9457 problem document as Signoff answers it. */
export interface Problem {
  status?: number;
  error_code?: string;
  message?: string;
  errors?: FieldError[];
  [extra: string]: unknown;
}

/** The server refused with an RFC 9457 problem. `errorCode` is stable. */
export class ApiError extends SignoffError {
  readonly status: number;
  readonly errorCode: string;
  readonly problem: Problem;
  constructor(message: string, status: number, errorCode: string, problem: Problem) {
    super(message);
    this.status = status;
    this.errorCode = errorCode;
    this.problem = problem;
  }

  /** Offending fields, `[{field, message}]` (422). */
  get errors(): FieldError[] {
    return Array.isArray(this.problem.errors) ? this.problem.errors : [];
  }

  override toString(): string {
    return `${this.errorCode} (${this.status}): ${this.message}`;
  }

  /** A text field of the problem, the first of `names` present. */
  protected problemText(...names: string[]): string | undefined {
    for (const name of names) {
      const value = this.problem[name];
      if (value !== undefined && value !== null && value !== "") return String(value);
    }
    return undefined;
  }

  /** A list field of the problem, as strings. */
  protected problemList(name: string): string[] {
    const value = this.problem[name];
    return Array.isArray(value) ? value.map(String) : [];
  }
}
