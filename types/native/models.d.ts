// Exports of cpp/addon/ for the models area (filled in as the area lands).
// eslint-disable-next-line @typescript-eslint/no-empty-interface
export interface NativeModels {}
