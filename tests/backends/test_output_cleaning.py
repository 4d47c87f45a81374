"""Cleaning a small chat model's replies: the text is kept, its wrapping goes, and replies that
do not do the task are marked failed."""

import pytest

from dpsynth.backends import FAILED
from dpsynth.backends.generators.output_cleaning import clean_reply

TEXT = "The parcel arrived two weeks late and the box was crushed."


@pytest.mark.parametrize("reply", [
    TEXT,
    f"Here's a short text about shipping:\n\n{TEXT}",
    f"Sure! Here is the rewritten text: {TEXT}",
    f"\"{TEXT}\"",
    f"“{TEXT}”",
    f"**Late delivery**\n\n{TEXT}",
    f"{TEXT}\n\nI hope this helps! Let me know if you need another one.",
    f"{TEXT}<|im_end|>\n<|im_start|>user\nthanks",
    f"{TEXT}\nuser",
    f"Rewritten text: {TEXT}",
    f"Aw, my apologies. Here is a revised version of the text: {TEXT}",
    f"Here's a sample of a short text about shipping. {TEXT}",
    f"Rewrite the text:\n\n{TEXT}",
])
def test_the_text_is_kept_and_its_wrapping_removed(reply):
    assert clean_reply(reply) == TEXT


@pytest.mark.parametrize("reply", [
    "I'm ready to assist you. What is your creative writing goal?",
    "I'm sorry, but I cannot write that.",
    "As an AI language model, I don't have opinions.",
    "What kind of text would you like me to write?",
    "Please provide the text you want me to rewrite.",
    "Sure!",
    "",
    "The above is a text. Output only the new text, without any other comment.",
    "The parcel _ two weeks late.",
    "You've done it right. Your description of the positive reviews is spot on.",
    "The original text was rephrased into 30 words with the same meaning.",
    "In this rewritten version, I added a few words to make the text more engaging.",
    "I'm going to give you a bad review. It's about people making bad movies.",
    # assistant talk behind a greeting, or after the first sentence
    "Hello! I'd be happy to help you write a review.",
    "Hi there! What topic would you like the article to be about?",
    "Hello! How can I help you today?",
    "Could you please provide more details about the topic?",
    "Thank you for the prompt! I will do my best.",
    "I can't help with that request.",
    "Sorry, I can't do that.",
    "Which genre should the story be in?",
    "Can you give me more information about what you need?",
    "I'm here to support you. How can I assist you today?",  # seen in trec pe runs
    "I'm sorry for the confusion. I'll help you craft a message or create something.",
    "I'm glad to hear that you're passionate about Roma and a LAD.",
    # seen among dpga's operators' outputs (benchmarks/smollm_on_task.py --dpga)
    "I'm ready to hear your feedback. What kind of feedback do you need from me?",
    "No, no! I'm sorry, but I'm afraid that's not possible. I'm not sure I can help you "
    "with that.",
])
def test_refusals_questions_echoes_and_leftover_blanks_fail(reply):
    assert clean_reply(reply) == FAILED


@pytest.mark.parametrize("text", [
    # questions: 23% of trec's training questions open with "What is/are/kind/type"; the
    # earlier rule failed every one, so no synthetic set held such a question
    "What is the capital of France?",
    "What kind of tree is a sequoia?",
    "Which is the longest river in Africa?",
    "What do you call a baby kangaroo?",
    # support messages and reviews open as a chat reply might
    "Hi, my order #1234 has not arrived yet and I need it by Friday.",
    "Hello, I was charged twice for my subscription this month.",
    "Thank you for the quick delivery, the shoes fit perfectly.",
    "Can you tell me why my invoice shows a late fee?",
    "Please provide a refund for the damaged lamp I received.",
    "I'm sorry to bother you, but my parcel is lost.",
    "I changed my password and now I cannot log in to my account.",
    "You've got to try the tacos at this place, they are amazing.",
    "I can't believe how good the pasta was here.",
    "I can't help but love this little bakery.",
    "I'm happy to say the new manager fixed everything.",
    "I'd love to come back with my family next summer.",
])
def test_a_document_that_asks_greets_or_thanks_is_kept(text):
    assert clean_reply(text) == text


def test_a_reply_is_cut_near_its_target_length_at_a_sentence_end():
    reply = " ".join(["One short sentence here."] * 20)  # 80 words
    cleaned = clean_reply(reply, target_words=10)
    assert cleaned.endswith(".")
    assert len(cleaned.split()) <= 20


def test_a_reply_cut_by_the_token_cap_ends_at_its_last_whole_sentence():
    reply = "The order came late. The box was crushed. Then the driver said that"
    assert clean_reply(reply) == "The order came late. The box was crushed."


def test_a_fill_that_drops_the_text_around_its_blanks_fails():
    keeps = "the parcel arrived late and the box was crushed".split()
    assert clean_reply("The parcel arrived very late and the box was crushed.",
                       keeps=keeps) != FAILED
    assert clean_reply("Shipping companies move goods around the world.", keeps=keeps) == FAILED


def test_a_reply_stuck_in_a_loop_fails():
    assert clean_reply("Happy, " * 30) == FAILED
    assert clean_reply("The film was the best film of the year and the cast was the best.") \
        != FAILED


def test_a_reply_far_shorter_than_its_target_fails():
    assert clean_reply("He's a fan of Buddy Holly.", target_words=32) == FAILED
    assert clean_reply(TEXT, target_words=15) == TEXT
