// What the page around docs/CLIENT.md's TypeScript blocks provides: the
// names those blocks use and leave to the page (scripts/test-package.sh
// compiles each block with these).
declare function token(): string;
declare function showReceipt(id: string): void;
declare function showDeclined(detail: string | undefined): void;
declare function showPaused(): void;
declare function showRetryLater(status: number | null): void;
/** The page's GraphQL endpoint (the Apollo recipe). */
declare const GRAPHQL_URL: string;
